// Package monitoring holds no code of the operator: its tests check the
// monitoring pack. promtool checks the alerts of
// config/prometheus/rules/prometheus_rule.yaml and runs their unit tests
// (testdata/alerts_test.yaml, one per alert), and lints the operator's
// metrics; a real Prometheus, on loopback, scrapes a real operator while the
// simulated Proxmox VE world serves Proxies and a pool, and every query of
// the Grafana dashboard (config/prometheus/dashboard) and every series the
// alerts read must return data. Prometheus and promtool come from Debian's
// prometheus package (hack/prometheus/install.sh, run by make test).
package monitoring
