// Package deploy holds no code of the relay: it is the directory of what
// deploys and demonstrates it (the quickstart, the example configuration,
// compose files, Kubernetes manifests, the Helm chart and its renderings,
// the systemd unit, the Grafana dashboard and alert rules, also as a
// PrometheusRule, and prometheus-adapter's rule for the gateway's
// autoscaler). Its tests hold the quickstart to what it promises, the
// manifests and the chart's renderings (helm/rendered, written by the
// release tool in .ci/release) to the Kubernetes API, the PrometheusRules
// to the rules file and OutboxRelayDown to every scraped Service; metrics'
// tests hold the dashboard, the alerts, the chart and the autoscalers to
// the metrics the relay and the gateway expose.
package deploy
