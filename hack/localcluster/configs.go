package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Client rate limits of the scheduler and the controller-manager. The defaults (QPS 20/50) make
// 1000 KWOK pods take 50 s; these put 1000 pods on 100 fake nodes in ~12 s on 2 cores (facts
// file, "Scale with KWOK"). A benchmark states them.
const (
	clientQPS   = 1000
	clientBurst = 2000
)

// writeKubeconfigs writes one kubeconfig per client identity plus the admin one (with embedded
// certificates, so it can be copied elsewhere) at the root of the run directory.
func writeKubeconfigs(l layout, server string) error {
	if err := os.MkdirAll(l.path("kubeconfigs"), 0o700); err != nil {
		return err
	}
	ca, err := os.ReadFile(l.pki("ca.crt"))
	if err != nil {
		return err
	}
	users := map[string]string{
		cAdmin:               cAdmin,
		"controller-manager": "controller-manager",
		"scheduler":          "scheduler",
		cProxy:               cProxy,
		cKubelet:             "kubelet-client",
		cKwok:                cAdmin,
		cProvisioner:         cProvisioner,
		cNetpol:              cNetpol,
	}
	for name, cert := range users {
		crt, err := os.ReadFile(l.pki(cert + ".crt"))
		if err != nil {
			return err
		}
		key, err := os.ReadFile(l.pki(cert + ".key"))
		if err != nil {
			return err
		}
		cfg := clientcmdapi.NewConfig()
		cfg.Clusters["shepherd-local"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
		cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{ClientCertificateData: crt, ClientKeyData: key}
		cfg.Contexts["shepherd-local"] = &clientcmdapi.Context{Cluster: "shepherd-local", AuthInfo: name, Namespace: "default"}
		cfg.CurrentContext = "shepherd-local"
		path := l.kubeconfig(name)
		if name == cAdmin {
			path = l.adminKubeconfig()
		}
		if err := clientcmd.WriteToFile(*cfg, path); err != nil {
			return fmt.Errorf("write kubeconfig %s: %w", name, err)
		}
	}
	return nil
}

// containerdConfig is containerd 1.6's config (version 2) with everything under the run
// directory: root, state, socket and runc's state, so `down` can delete it all (facts file,
// point 6). Not a system containerd: this one is ours alone.
func containerdConfig(l layout, pauseImage string) string {
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	return fmt.Sprintf(`version = 2
root = %s
state = %s
# Plugins we do not use; disabling them keeps their "failed to load" noise out of the log.
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = %s

[ttrpc]
  address = %s

[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = %s
  [plugins."io.containerd.grpc.v1.cri"]
    # The pause image is built locally (no registry); containerd never pulls it.
    sandbox_image = %s
    # Root here lacks CAP_SYS_RESOURCE: lowering oom_score_adj (-998 for sandboxes) fails
    # (facts file, point 2).
    restrict_oom_score_adj = true
    stream_server_address = "127.0.0.1"
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          # No systemd here: cgroupfs, like the kubelet (facts file, points 1 and 6).
          SystemdCgroup = false
          Root = %s
    # Registry hosts (hosts.toml per registry, containerd's certs.d layout) are read from here
    # at each pull: a test that serves a plain-HTTP registry on the node writes
    # <host:port>/hosts.toml here (docs/local-cluster.md, "Registries").
    [plugins."io.containerd.grpc.v1.cri".registry]
      config_path = %s
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = %s
      max_conf_num = 1
`, q(l.containerd("root")), q(l.containerd("state")), q(l.containerdSock()), q(l.containerdSock()+".ttrpc"),
		q(l.containerd("opt")), q(pauseImage), q(l.containerd("runc")), q(l.registryHosts()), q(l.cniConfDir()))
}

// cniConfig is a bridge network for the real node's pods with host-local IPAM whose state lives
// in the run directory, plus portmap for hostPort (facts file, point 6). The bridge's MTU follows
// the node's interface, so pods never send packets the uplink cannot carry.
func cniConfig(l layout, mtu int) (string, error) {
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       "shepherd",
		"plugins": []any{
			map[string]any{
				"type":        "bridge",
				"bridge":      bridgeName,
				"isGateway":   true,
				"ipMasq":      true,
				"hairpinMode": true,
				"mtu":         mtu,
				"ipam": map[string]any{
					"type":    "host-local",
					"ranges":  [][]map[string]string{{{"subnet": podSubnet}}},
					"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
					"dataDir": l.cniIPAMDir(),
				},
			},
			map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}},
		},
	}
	raw, err := json.MarshalIndent(conf, "", "  ")
	return string(raw), err
}

// kubeletConfig is the KubeletConfiguration; every non-default setting has its reason.
func kubeletConfig(l layout, nodeIP net.IP) (string, error) {
	cfg := map[string]any{
		"apiVersion": "kubelet.config.k8s.io/v1beta1",
		"kind":       "KubeletConfiguration",
		// kubelet >= 1.35 refuses cgroup v1 unless told; no systemd, so cgroupfs (point 1).
		"failCgroupV1": false,
		"cgroupDriver": "cgroupfs",
		// Root lacks CAP_SYS_RESOURCE: the kubelet must not lower its own oom_score_adj (point 2).
		"oomScoreAdj": 0,
		// The apiserver reaches the kubelet (logs, exec) by the node IP (point 4).
		"address":            nodeIP.String(),
		"port":               kubeletPort,
		"readOnlyPort":       0,
		"healthzBindAddress": "127.0.0.1",
		"healthzPort":        kubeletHealthz,
		"tlsCertFile":        l.pki("kubelet-serving.crt"),
		"tlsPrivateKeyFile":  l.pki("kubelet-serving.key"),
		"authentication": map[string]any{
			"anonymous": map[string]bool{"enabled": false},
			"webhook":   map[string]bool{"enabled": true},
			"x509":      map[string]string{"clientCAFile": l.pki("ca.crt")},
		},
		"authorization":            map[string]string{"mode": "Webhook"},
		"containerRuntimeEndpoint": "unix://" + l.containerdSock(),
		"imageServiceEndpoint":     "unix://" + l.containerdSock(),
		"clusterDomain":            "cluster.local",
		"resolvConf":               "/etc/resolv.conf",
		"failSwapOn":               false,
		// Keep pod logs and volume plugins inside the run directory, not in /var/log/pods and
		// /usr/libexec.
		"podLogsDir":      l.podLogs(),
		"volumePluginDir": l.kubelet("volume-plugins"),
		// Images come from `ctr import`, not a registry: a garbage-collected image cannot be
		// pulled back, so image GC is off and evictions only fire when the disk is really full.
		"imageGCHighThresholdPercent": 100,
		"imageGCLowThresholdPercent":  99,
		// The kubelet trusts an image it did not pull (NeverVerifyPreloadedImages, the default)
		// only until it pulls the same image (the same ID) from a registry: from then on a pod
		// naming the imported tag with pullPolicy Never is refused ErrImageNeverPull, as seen
		// when the e2e suite's Helm spec pulled the runner from its registry and a later spec ran
		// shepherd-runner:latest. Every image here is imported and anonymous: verify none.
		"imagePullCredentialsVerificationPolicy": "NeverVerify",
		"evictionHard": map[string]string{
			"memory.available":  "100Mi",
			"nodefs.available":  "1%",
			"nodefs.inodesFree": "1%",
			"imagefs.available": "1%",
		},
		"serializeImagePulls": false,
		"rotateCertificates":  false,
		"serverTLSBootstrap":  false,
		"registerNode":        true,
	}
	raw, err := json.MarshalIndent(cfg, "", "  ")
	return string(raw), err
}

// schedulerConfig turns off leader election (one replica) and raises the client limits.
func schedulerConfig(l layout) string {
	return fmt.Sprintf(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %q
  qps: %d
  burst: %d
leaderElection:
  leaderElect: false
`, l.kubeconfig("scheduler"), clientQPS, clientBurst)
}

// kwokStages are KWOK's default stages, read from its module: without them KWOK exits with
// "no stages found" (facts file, "KWOK"). Nodes initialize and keep a lease; pods become ready,
// complete and are deleted.
var kwokStages = []string{
	"kustomize/stage/node/fast/node-initialize.yaml",
	"kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
	"kustomize/stage/pod/fast/pod-ready.yaml",
	"kustomize/stage/pod/fast/pod-complete.yaml",
	"kustomize/stage/pod/fast/pod-delete.yaml",
}

// kwokRunning and kwokPrepareDone are the container state of KWOK's pod-ready stage and what
// the stage says instead for a container named prepare: Shepherd's checkout step, which runs
// beside the agent's container and ends (a kubelet reports it terminated; KWOK runs nothing, so
// it ends at once, as the init container it was did under KWOK's stage). On a Shepherd pod (it
// carries the Worktree's label) the step's termination message is a result as the real step
// writes it (workspace.Result: the checkout's path and facts), so that the manager reads the
// checkout's head from the step, as from a real one, and the runner's first report (which
// bench-fanout plays with the same head) repeats it instead of changing it. KWOK checks out
// nothing: the head is the pod's UID, a stand-in no commit can be mistaken for.
const (
	kwokRunning = `        ready: true
        restartCount: 0
        state:
          running:
            startedAt: {{ $now | Quote }}
      {{ end }}

      initContainerStatuses:`
	kwokPrepareDone = `        restartCount: 0
        {{ if eq .name "prepare" }}
        ready: false
        state:
          terminated:
            exitCode: 0
            finishedAt: {{ $now | Quote }}
            reason: Completed
            startedAt: {{ $now | Quote }}
            {{ with $.metadata.labels }}{{ with index . "agents.shepherd.dev/worktree" }}
            message: {{ printf "{\"path\":\"/shepherd/workspace/worktrees/%s\",\"facts\":{\"head\":\"%s\"}}" . $.metadata.uid | Quote }}
            {{ end }}{{ end }}
        {{ else }}
        ready: true
        state:
          running:
            startedAt: {{ $now | Quote }}
        {{ end }}
      {{ end }}

      initContainerStatuses:`
)

func kwokConfig(moduleDir string) (string, error) {
	var b strings.Builder
	for i, rel := range kwokStages {
		raw, err := os.ReadFile(filepath.Join(moduleDir, rel))
		if err != nil {
			return "", fmt.Errorf("read KWOK stage: %w", err)
		}
		if strings.HasSuffix(rel, "/pod-ready.yaml") {
			if !strings.Contains(string(raw), kwokRunning) {
				return "", fmt.Errorf("KWOK's %s changed: its containers' running state is not where the checkout step's end goes", rel)
			}
			raw = []byte(strings.Replace(string(raw), kwokRunning, kwokPrepareDone, 1))
		}
		if i > 0 {
			b.WriteString("\n---\n")
		}
		b.Write(raw)
	}
	return b.String(), nil
}
