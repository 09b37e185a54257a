package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// Component names: their log, pid and kubeconfig files, and their binaries' base names.
const (
	cEtcd              = "etcd"
	cContainerd        = "containerd"
	cAPIServer         = "kube-apiserver"
	cControllerManager = "kube-controller-manager"
	cScheduler         = "kube-scheduler"
	cKubelet           = "kubelet"
	cProxy             = "kube-proxy"
	cKwok              = "kwok"
	cProvisioner       = "provisioner" // the volume provisioner: this program's `provisioner` command
	cNetpol            = "kube-router" // its network-policy controller only (netpol.go)
	cAdmin             = "admin"
)

// Fixed network settings of the local cluster.
const (
	nodeName        = "shepherd-node"
	serviceCIDR     = "10.96.0.0/12"
	kubernetesSvc   = "10.96.0.1" // first address of serviceCIDR: the `kubernetes` Service
	clusterCIDR     = "10.244.0.0/16"
	podSubnet       = "10.244.0.0/24" // the real node's pods (host-local IPAM)
	bridgeName      = "cni0"
	apiserverPort   = 6443
	etcdClientPort  = 2379
	etcdPeerPort    = 2380
	kubeletPort     = 10250
	kubeletHealthz  = 10248
	proxyMetrics    = 10249
	proxyHealthz    = 10256
	cmPort          = 10257
	schedulerPort   = 10259
	kwokPort        = 10247
	provisionerPort = 10246 // the provisioner's /healthz on loopback
	netpolHealthz   = 20244 // kube-router's /healthz (its default port; it binds every address)

	// kwokNodeAnnotation marks the fake nodes KWOK manages; the real node has none.
	kwokNodeAnnotation = "kwok.x-k8s.io/node"
)

// layout names every path in the run directory (docs/local-cluster.md, "Run directory").
type layout struct{ root string }

func newLayout(root string) layout { return layout{root: root} }

func (l layout) path(elem ...string) string {
	return filepath.Join(append([]string{l.root}, elem...)...)
}
func (l layout) stateFile() string       { return l.path("state.json") }
func (l layout) adminKubeconfig() string { return l.path("kubeconfig") }
func (l layout) pki(name string) string  { return l.path("pki", name) }
func (l layout) kubeconfig(c string) string {
	return l.path("kubeconfigs", c+".kubeconfig")
}
func (l layout) logs() string            { return l.path("logs") }
func (l layout) logFile(c string) string { return l.path("logs", c+".log") }
func (l layout) pidFile(c string) string { return l.path("pids", c+".pid") }
func (l layout) etcdData() string        { return l.path(cEtcd) }
func (l layout) containerd(e ...string) string {
	return l.path(append([]string{cContainerd}, e...)...)
}
func (l layout) containerdSock() string { return l.containerd("containerd.sock") }

// registryHosts is containerd's registry configuration directory (config_path): one
// <host:port>/hosts.toml per registry.
func (l layout) registryHosts() string { return l.containerd("certs.d") }
func (l layout) cniConfDir() string    { return l.path("cni", "net.d") }
func (l layout) cniIPAMDir() string    { return l.path("cni", "ipam") }
func (l layout) kubelet(e ...string) string {
	return l.path(append([]string{cKubelet}, e...)...)
}
func (l layout) podLogs() string { return l.path("pod-logs") }
func (l layout) kwok(e ...string) string {
	return l.path(append([]string{cKwok}, e...)...)
}
func (l layout) component(c string) string { return l.path("components", c) }

// volumes holds one directory per provisioned PersistentVolume, named after it.
func (l layout) volumes() string { return l.path("volumes") }

// state records what `up` started, so a second `up` can tell whether the running cluster fits.
type state struct {
	NodeIP    string `json:"nodeIP"`
	KwokNodes int    `json:"kwokNodes"`
	BinDir    string `json:"binDir"`
	// Sysctls are the host's values before `up` changed them; `down` restores them.
	Sysctls map[string]string `json:"sysctls,omitempty"`
	// Ready is set once every component answered and the node is Ready.
	Ready bool `json:"ready"`
}

func readState(l layout) (state, error) {
	var s state
	raw, err := os.ReadFile(l.stateFile())
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return s, fmt.Errorf("parse %s: %w", l.stateFile(), err)
	}
	return s, nil
}

func writeState(l layout, s state) error {
	raw, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(l.stateFile(), append(raw, '\n'), 0o644)
}
