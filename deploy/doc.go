// Package deploy holds no code of the relay: it is the directory of what
// deploys and demonstrates it (the quickstart, the example configuration,
// compose files, Kubernetes manifests, the systemd unit, the Grafana
// dashboard and alert rules). Its tests hold the quickstart to what it
// promises; metrics' tests hold the dashboard and alerts to the metrics the
// relay exposes.
package deploy
