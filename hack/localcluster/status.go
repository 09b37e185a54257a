package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// componentNames in start order; `down` stops them in reverse.
var componentNames = []string{cEtcd, cContainerd, cAPIServer, cProvisioner, cControllerManager, cScheduler, cKubelet, cProxy, cNetpol, cKwok}

// health is one line of `status`.
type health struct {
	name string
	pid  int
	run  bool
	err  error // probe result when running
}

type healthReport []health

func (r healthReport) ok() bool {
	for _, h := range r {
		if !h.run || h.err != nil {
			return false
		}
	}
	return len(r) > 0
}

// checkHealth probes every component the state says should run, and the node.
func checkHealth(ctx context.Context, l layout, st state) healthReport {
	plain := &http.Client{Timeout: 3 * time.Second}
	insecure := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // loopback health checks of self-signed serving certificates
	server := "https://" + net.JoinHostPort(st.NodeIP, strconv.Itoa(apiserverPort))
	probes := map[string]func(context.Context) error{
		cEtcd:              httpProbe(plain, fmt.Sprintf("http://127.0.0.1:%d/health", etcdClientPort), `"health":"true"`),
		cControllerManager: httpProbe(insecure, fmt.Sprintf("https://127.0.0.1:%d/healthz", cmPort), "ok"),
		cScheduler:         httpProbe(insecure, fmt.Sprintf("https://127.0.0.1:%d/healthz", schedulerPort), "ok"),
		cKubelet:           httpProbe(plain, fmt.Sprintf("http://127.0.0.1:%d/healthz", kubeletHealthz), "ok"),
		cProxy:             httpProbe(plain, fmt.Sprintf("http://127.0.0.1:%d/healthz", proxyHealthz), ""),
		cKwok:              httpProbe(plain, fmt.Sprintf("http://127.0.0.1:%d/healthz", kwokPort), ""),
		cProvisioner:       httpProbe(plain, fmt.Sprintf("http://127.0.0.1:%d/healthz", provisionerPort), "ok"),
		cNetpol:            netpolProbe(plain),
		cContainerd: func(ctx context.Context) error {
			c, err := dialCRI(l.containerdSock())
			if err != nil {
				return err
			}
			defer func() { _ = c.Close() }()
			return c.version(ctx)
		},
		cAPIServer: func(ctx context.Context) error {
			c, err := apiserverHTTPClient(l)
			if err != nil {
				return err
			}
			c.Timeout = 3 * time.Second
			return httpProbe(c, server+"/readyz", "ok")(ctx)
		},
	}
	var rep healthReport
	for _, name := range componentNames {
		if name == cKwok && st.KwokNodes == 0 {
			continue
		}
		h := health{name: name}
		h.pid, h.run = l.pidOf(name, name)
		if h.run {
			h.err = probes[name](ctx)
		}
		rep = append(rep, h)
	}
	if rep.ok() {
		node := health{name: "node/" + nodeName, run: true}
		cs, err := adminClientset(l)
		if err == nil {
			nctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err = nodeReady(nctx, cs, nodeName)
			cancel()
		}
		node.err = err
		rep = append(rep, node)
	}
	return rep
}

func cmdStatus(ctx context.Context, g globals, args []string) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	if err := fs.Parse(args); err != nil {
		return usageErr{err.Error()}
	}
	l := newLayout(g.runDir)
	st, err := readState(l)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			fmt.Printf("no cluster in %s\n", g.runDir)
			if left := clusterProcesses(l); len(left) > 0 {
				fmt.Printf("but %d of its processes still run (run `localcluster down`)\n", len(left))
			}
			return errNotHealthy
		}
		return err
	}
	rep := checkHealth(ctx, l, st)
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "COMPONENT\tPID\tSTATE\tLOG")
	for _, h := range rep {
		stateStr := "running"
		switch {
		case !h.run:
			stateStr = "stopped"
		case h.err != nil:
			stateStr = "unhealthy: " + firstLine(h.err.Error())
		}
		pid, logPath := "-", "-"
		if h.pid > 0 {
			pid = strconv.Itoa(h.pid)
		}
		if !strings.HasPrefix(h.name, "node/") {
			logPath = l.logFile(h.name)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", h.name, pid, stateStr, logPath)
	}
	_ = tw.Flush()
	fmt.Printf("node IP %s; KWOK nodes %d; KUBECONFIG=%s\n", st.NodeIP, st.KwokNodes, l.adminKubeconfig())
	if !rep.ok() {
		return errNotHealthy
	}
	return nil
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
