-- The webhook endpoints table: one row per endpoint (sinks[].webhook.endpoints_table).
-- Create it in the source database (the relay reads it at start and follows its
-- changes through the binlog), e.g.: mysql shop < deploy/outbox_endpoints.sql
-- Works on MariaDB 10.5+ and MySQL 8. The relay's user needs SELECT on it.
--
-- secrets: space-separated; each a plain "whsec_..." (accepted, with a warning) or
-- an encrypted "enc:v2:..." made for its row (table, id and url) by
--   outbox-relay endpoints encrypt-secret --table shop.outbox_endpoints --id ID --url URL < secret.txt
--   (key: $OUTBOX_RELAY_SECRETS_KEY)
-- and decrypted with endpoints_table.secrets_key; it decrypts in that row only (encrypt
-- again when the url changes). Older "enc:v1:..." values are read, with a warning.
CREATE TABLE IF NOT EXISTS outbox_endpoints (
  id              VARCHAR(64)   NOT NULL PRIMARY KEY, -- the endpoint's stable name: letters, digits, '.', '_', '-'
  url             VARCHAR(2048) NOT NULL,             -- https address receiving the POSTs
  secrets         TEXT          NULL,                 -- space-separated; each "whsec_..." or "enc:v2:..." (outbox-relay endpoints encrypt-secret)
  tenant          VARCHAR(255)  NULL,                 -- set: only events whose tenant header (endpoints_table.tenant_header) equals it
  event_types     VARCHAR(1024) NULL,                 -- comma-separated globs on the event type; NULL: all
  aggregate_types VARCHAR(1024) NULL,                 -- comma-separated globs on the aggregate type; NULL: all
  rate_limit      DOUBLE        NULL,                 -- attempts per second; NULL: endpoints_table.defaults.rate_limit
  enabled         TINYINT(1)    NOT NULL DEFAULT 1,
  created_at      TIMESTAMP(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  updated_at      TIMESTAMP(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
  KEY ix_tenant (tenant, id)                          -- a tenant's page of the console reads its own rows only
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
