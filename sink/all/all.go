// Package all registers every sink kind of this build: importing it (for
// its side effects) is what makes their types known to package config and
// the commands. A new sink kind is its package plus one line here.
package all

import (
	_ "github.com/outbox-relay/outbox-relay/sink/kafka"    // type kafka
	_ "github.com/outbox-relay/outbox-relay/sink/nats"     // type nats
	_ "github.com/outbox-relay/outbox-relay/sink/rabbitmq" // type rabbitmq
	_ "github.com/outbox-relay/outbox-relay/sink/redis"    // type redis
	_ "github.com/outbox-relay/outbox-relay/sink/stdout"   // type stdout
	_ "github.com/outbox-relay/outbox-relay/sink/webhook"  // type webhook
)
