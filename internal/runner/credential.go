package runner

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/shepherd-dev/shepherd/internal/runnerapi"
)

// Credential implements git's credential-helper protocol for `runner credential <op>`: for
// "get" it reads protocol/host/path from stdin, asks the manager for a short-lived credential
// and prints it for git. "store" and "erase" are ignored: nothing is ever kept on disk. The
// credential goes to git's stdin only, never into argv, a URL, .git/config or a log.
func Credential(ctx context.Context, op string, in io.Reader, out io.Writer, ch Channel) error {
	attrs := map[string]string{}
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			break
		}
		if k, v, ok := strings.Cut(line, "="); ok {
			attrs[k] = v
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read credential request: %w", err)
	}
	if op != "get" {
		return nil
	}
	if !ch.Enabled() {
		return fmt.Errorf("no manager configured (%s is empty)", EnvManagerURL)
	}
	client, err := ch.Client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var c *runnerapi.Credentials
	err = retry(ctx, "get credentials", func() error {
		var err error
		c, err = client.PushCredentials(ctx, runnerapi.CredentialRequest{Protocol: attrs["protocol"], Host: attrs["host"], Path: attrs["path"]})
		return err
	})
	if err != nil {
		return fmt.Errorf("get credentials for %s://%s: %w", attrs["protocol"], attrs["host"], err)
	}
	if strings.ContainsAny(c.Username+c.Password, "\n\x00") {
		return fmt.Errorf("the manager returned a credential git cannot carry")
	}
	fmt.Fprintf(out, "username=%s\npassword=%s\n", c.Username, c.Password)
	if !c.ExpiresAt.IsZero() {
		// git ≥ 2.41 drops the credential after this time instead of caching it longer.
		fmt.Fprintf(out, "password_expiry_utc=%d\n", c.ExpiresAt.Unix())
	}
	return nil
}
