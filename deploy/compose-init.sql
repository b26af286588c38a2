-- Runs once, when the compose MySQL volume is created.
CREATE DATABASE IF NOT EXISTS shop;
CREATE TABLE IF NOT EXISTS shop.outbox (
  id            CHAR(36)    NOT NULL PRIMARY KEY,
  aggregatetype VARCHAR(64) NOT NULL,
  aggregateid   VARCHAR(64) NOT NULL,
  type          VARCHAR(64) NOT NULL,
  payload       JSON        NOT NULL
);
CREATE USER IF NOT EXISTS 'relay'@'%' IDENTIFIED BY 'relay-password-change-me';
GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'relay'@'%';
GRANT SELECT ON shop.outbox TO 'relay'@'%';
