module github.com/egress-proxies/egress-proxies-operator/internal/testing/pvesim/clientcheck

go 1.26.0

require (
	github.com/egress-proxies/egress-proxies-operator v0.0.0
	github.com/luthermonson/go-proxmox v0.8.2
)

require (
	github.com/buger/goterm v1.0.4 // indirect
	github.com/diskfs/go-diskfs v1.9.3 // indirect
	github.com/djherbis/times v1.6.0 // indirect
	github.com/gorilla/websocket v1.4.2 // indirect
	github.com/jinzhu/copier v0.3.4 // indirect
	github.com/magefile/mage v1.14.0 // indirect
	go.yaml.in/yaml/v2 v2.4.4 // indirect
	golang.org/x/sys v0.50.0 // indirect
	sigs.k8s.io/yaml v1.6.0 // indirect
)

replace github.com/egress-proxies/egress-proxies-operator => ../../../..
