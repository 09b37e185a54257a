// Command gitea builds a pinned Gitea from the Go module proxy into the shared cache and runs it
// for tests and the local cluster (hack/gitea.sh wraps it; docs/gitea.md explains the settings).
//
//	gitea build          compile Gitea once into the cache; print the directory of the binary
//	gitea start --dir DIR [--addr A] [--port N] [--host H] [--webhook-hosts loopback,private]
//	                     start a forge in DIR (detached); print its variables
//	gitea env --dir DIR  print the variables of the forge in DIR
//	gitea stop --dir DIR stop the forge in DIR (SIGTERM, then SIGKILL)
//
// The env printed by start and env is shell syntax: GITEA_URL, GITEA_API_URL, GITEA_ADMIN,
// GITEA_ADMIN_TOKEN, GITEA_ADMIN_PASSWORD, GITEA_REVIEWER, GITEA_REVIEWER_TOKEN,
// GITEA_REVIEWER_PASSWORD, GITEA_PID.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/shepherd-dev/shepherd/test/gitea"
)

const usage = `usage: gitea <command> [flags]

commands:
  build: build Gitea ` + gitea.Version + ` into the shared cache (once) and print its directory
  start: start a forge in --dir (detached) with an admin, a reviewer and tokens; print its variables
  env:   print the variables of the forge in --dir
  stop:  stop the forge in --dir
`

func main() {
	if err := mainErr(); err != nil {
		fmt.Fprintln(os.Stderr, "gitea:", err)
		os.Exit(1)
	}
}

func mainErr() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return run(ctx, os.Args[1:])
}

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return errors.New("a command is required")
	}
	cmd, args := args[0], args[1:]
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	dir := fs.String("dir", "", "run directory of the forge")
	addr := fs.String("addr", "127.0.0.1", "listen address (0.0.0.0 or the node IP to serve pods)")
	port := fs.Int("port", 0, "listen port (default: a free port)")
	host := fs.String("host", "", "host of ROOT_URL, the name clients use (default: the listen address)")
	hooks := fs.String("webhook-hosts", "loopback", "webhook ALLOWED_HOST_LIST (add private for a cluster Service)")
	level := fs.String("log-level", "Warn", "Gitea's log level")
	timeout := fs.Duration("timeout", 40*time.Minute, "bound of the whole command (a cold build takes minutes)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	switch cmd {
	case "build":
		d, err := gitea.Build(ctx, os.Stderr)
		if err != nil {
			return err
		}
		fmt.Println(d)
		return nil
	case "start":
		if *dir == "" {
			return errors.New("start: --dir is required")
		}
		s, err := gitea.Start(ctx, gitea.Options{
			Dir: *dir, Addr: *addr, Port: *port, Host: *host, WebhookHosts: strings.Split(*hooks, ","),
			LogLevel: *level, Detach: true, Log: os.Stderr,
		})
		if err != nil {
			return err
		}
		printEnv(s)
		return nil
	case "env":
		s, err := attach(*dir)
		if err != nil {
			return err
		}
		if !s.Running() {
			return fmt.Errorf("the forge in %s is not running", *dir)
		}
		printEnv(s)
		return nil
	case "stop":
		s, err := attach(*dir)
		if err != nil {
			return err
		}
		return s.Stop()
	}
	fmt.Fprint(os.Stderr, usage)
	return fmt.Errorf("unknown command %q", cmd)
}

func attach(dir string) (*gitea.Server, error) {
	if dir == "" {
		return nil, errors.New("--dir is required")
	}
	return gitea.Attach(dir)
}

func printEnv(s *gitea.Server) {
	for _, kv := range [][2]string{
		{"GITEA_URL", s.URL}, {"GITEA_API_URL", s.APIURL},
		{"GITEA_ADMIN", s.Admin.Name}, {"GITEA_ADMIN_TOKEN", s.Admin.Token}, {"GITEA_ADMIN_PASSWORD", s.Admin.Password},
		{"GITEA_REVIEWER", s.Reviewer.Name}, {"GITEA_REVIEWER_TOKEN", s.Reviewer.Token}, {"GITEA_REVIEWER_PASSWORD", s.Reviewer.Password},
		{"GITEA_PID", fmt.Sprint(s.PID)},
	} {
		fmt.Printf("export %s=%q\n", kv[0], kv[1])
	}
}
