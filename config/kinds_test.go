package config_test

import _ "github.com/outbox-relay/outbox-relay/sink/all" // the sink kinds the configs of these tests use
