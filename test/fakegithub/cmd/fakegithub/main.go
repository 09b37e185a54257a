// Command fakegithub serves the in-repo fake GitHub (test/fakegithub) for the offline demo and
// e2e: the REST and GraphQL subset Shepherd uses, git over HTTP on real bare repositories, signed
// webhooks to -webhook-url, and the test controls under /_fake/.
//
//	fakegithub -listen 127.0.0.1:8080 -data /tmp/fakegithub \
//	  -webhook-url http://127.0.0.1:9443/webhooks/github -webhook-secret s3cret \
//	  -token demo-token=shepherd -repo demo/app -repo demo/lib:trunk
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/shepherd-dev/shepherd/test/fakegithub"
)

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	var (
		listen        = flag.String("listen", "127.0.0.1:8080", "address to listen on (host:port)")
		data          = flag.String("data", "", "directory for the bare repositories (temporary when empty)")
		webhookURL    = flag.String("webhook-url", "", "URL that receives signed webhooks")
		webhookSecret = flag.String("webhook-secret", "", "webhook signing secret (or $FAKEGITHUB_WEBHOOK_SECRET)")
		coreLimit     = flag.Int("core-limit", 5000, "REST requests per hour per identity")
		graphqlLimit  = flag.Int("graphql-limit", 5000, "GraphQL points per hour per identity")
		secondary     = flag.Int("secondary-per-minute", 0, "REST points per minute before a secondary limit (GitHub: 900); 0 disables")
		verbose       = flag.Bool("v", false, "log every request")
		tokens, repos listFlag
	)
	flag.Var(&tokens, "token", "token=login accepted as a personal access token (repeatable)")
	flag.Var(&repos, "repo", "owner/name[:default-branch] to create with an initial commit (repeatable)")
	flag.Parse()
	if *webhookSecret == "" {
		*webhookSecret = os.Getenv("FAKEGITHUB_WEBHOOK_SECRET")
	}
	opts := fakegithub.Options{Dir: *data, WebhookURL: *webhookURL, WebhookSecret: []byte(*webhookSecret),
		CoreLimit: *coreLimit, GraphQLLimit: *graphqlLimit, SecondaryPointsPerMinute: *secondary}
	if *verbose {
		opts.Logf = log.Printf
	}
	if err := run(opts, *listen, tokens, repos); err != nil {
		log.Fatal(err)
	}
}

func run(opts fakegithub.Options, listen string, tokens, repos []string) error {
	s, err := fakegithub.New(opts)
	if err != nil {
		return err
	}
	defer func() { _ = s.Close() }()
	if err := s.Start(listen); err != nil {
		return err
	}
	for _, t := range tokens {
		tok, login, ok := strings.Cut(t, "=")
		if !ok || tok == "" || login == "" {
			return fmt.Errorf("-token %q: want token=login", t)
		}
		s.AddToken(tok, login)
	}
	for _, r := range repos {
		name, branch, _ := strings.Cut(r, ":")
		if _, err := s.CreateRepo(name, branch, nil); err != nil {
			return fmt.Errorf("-repo %s: %w", r, err)
		}
	}
	log.Printf("fake GitHub serving at %s (GraphQL %s/graphql, git %s/<owner>/<repo>.git, controls %s/_fake/)", s.URL(), s.URL(), s.URL(), s.URL())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	log.Print("shutting down")
	return nil
}
