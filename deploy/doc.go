// Package deploy holds no code of the relay: it is the directory of what
// deploys and demonstrates it (the quickstart, the example configuration,
// compose files, Kubernetes manifests, the systemd unit, the Grafana
// dashboard and alert rules, also as a PrometheusRule). Its tests hold the
// quickstart to what it promises, the manifests to the Kubernetes API, the
// PrometheusRule to the rules file and OutboxRelayDown to every scraped
// Service; metrics' tests hold the dashboard and alerts to the metrics the
// relay exposes.
package deploy
