package kubectlplugin

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/shepherd-dev/shepherd/internal/transcript"
)

// UIPrefix is where the API server serves Shepherd's aggregated API (internal/ui).
const UIPrefix = "/apis/ui.agents.shepherd.dev/v1alpha1"

// TranscriptPath is a session's transcript in the aggregated API.
func TranscriptPath(ns, name string) string {
	return UIPrefix + "/namespaces/" + url.PathEscape(ns) + "/agentsessions/" + url.PathEscape(name) + "/transcript"
}

// transcriptList is the transcript endpoint's answer (ui.TranscriptList).
type transcriptList struct {
	Entries []transcript.Entry `json:"entries"`
	Dropped bool               `json:"dropped"`
	Last    uint64             `json:"last"`
}

type logsOptions struct {
	follow bool
	raw    bool
	since  uint64
	tail   int
}

func newLogs(o *Options) *cobra.Command {
	l := &logsOptions{}
	cmd := &cobra.Command{
		Use:   "logs NAME",
		Short: "Print a session's transcript: turns, what the agent said, its tool calls and their results, questions, cost",
		Long: `logs prints the transcript the session's runner streams to Shepherd (the manager keeps the newest
1000 entries per session; the session's volume keeps all of them). Reading it needs get on the
AgentSession. -f follows it live; --raw prints each entry as a JSON line.`,
		Example: `  kubectl shepherd logs widgets-42 -f
  kubectl shepherd logs widgets-42 --raw | jq 'select(.kind == "ToolCall")'`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			e, err := o.env()
			if err != nil {
				return err
			}
			if err := e.requireNamespace(); err != nil {
				return err
			}
			return l.run(cmd.Context(), e, args[0])
		},
	}
	cmd.Flags().BoolVarP(&l.follow, "follow", "f", false, "Follow the transcript as the agent works.")
	cmd.Flags().BoolVar(&l.raw, "raw", false, "Print each entry as a JSON line (kind, text, tool, usage, seq, time, turn).")
	cmd.Flags().Uint64Var(&l.since, "since-seq", 0, "Print entries after this sequence number only.")
	cmd.Flags().IntVar(&l.tail, "tail", 0, "Print the newest N entries only (at most 1000); 0 prints all the manager holds.")
	return cmd
}

func (l *logsOptions) print(w io.Writer, e transcript.Entry) error {
	if l.raw {
		b, err := json.Marshal(e)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	_, err := fmt.Fprintln(w, transcript.Format(e))
	return err
}

func (l *logsOptions) run(ctx context.Context, e *env, name string) error {
	if l.tail < 0 || l.tail > transcript.DefaultMaxEntries {
		return fmt.Errorf("--tail must be from 0 to %d", transcript.DefaultMaxEntries)
	}
	// Discovery's client speaks JSON only: the API server's refusals (RBAC) then decode as Status.
	rc := e.kube.Discovery().RESTClient()
	if !l.follow {
		rctx, cancel := context.WithTimeout(ctx, requestTimeout)
		defer cancel()
		res := rc.Get().AbsPath(TranscriptPath(e.ns, name)).Param("since", strconv.FormatUint(l.since, 10)).
			Param("limit", strconv.Itoa(l.tail)).Do(rctx)
		if err := res.Error(); err != nil {
			return transcriptError(err, e.ns, name)
		}
		body, _ := res.Raw()
		var list transcriptList
		if err := json.Unmarshal(body, &list); err != nil {
			return fmt.Errorf("read the transcript: %w", err)
		}
		if list.Dropped && l.since == 0 && l.tail == 0 && !l.raw {
			fmt.Fprintln(e.opts.Streams.ErrOut, "(older entries are no longer in the manager's window; the session's volume keeps them all)")
		}
		for _, en := range list.Entries {
			if err := l.print(e.out, en); err != nil {
				return err
			}
		}
		return nil
	}
	// Follow: one stream at a time; when it ends (the server's limit, a manager restart) the
	// next continues after the last entry printed.
	since, limit, backoff := l.since, l.tail, time.Second
	for {
		stream, err := rc.Get().AbsPath(TranscriptPath(e.ns, name)).Param("follow", "true").
			Param("since", strconv.FormatUint(since, 10)).Param("limit", strconv.Itoa(limit)).Stream(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
				return transcriptError(err, e.ns, name)
			}
			fmt.Fprintf(e.opts.Streams.ErrOut, "(transcript stream: %v; again in %s)\n", err, backoff)
		} else {
			backoff = time.Second
			sc := bufio.NewScanner(stream)
			sc.Buffer(nil, 1<<20)
			for sc.Scan() {
				if len(sc.Bytes()) == 0 {
					continue // a heartbeat
				}
				var en transcript.Entry
				if err := json.Unmarshal(sc.Bytes(), &en); err != nil {
					_ = stream.Close()
					return fmt.Errorf("read the transcript stream: %w", err)
				}
				if en.Seq <= since && since > 0 {
					continue
				}
				if err := l.print(e.out, en); err != nil {
					_ = stream.Close()
					return err
				}
				since = en.Seq
			}
			_ = stream.Close()
			limit = 0
		}
		if ctx.Err() != nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 30*time.Second)
	}
}

// transcriptError explains a refused transcript request.
func transcriptError(err error, ns, name string) error {
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("forbidden: you may not read the transcript of session %s in namespace %s: it needs get on agentsessions/transcript (ui.agents.shepherd.dev) and on the AgentSession, which the view and edit roles give (%w)", name, ns, err)
	}
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("session %s in namespace %s not found, or Shepherd's transcript API (APIService v1alpha1.ui.agents.shepherd.dev) is not served here: %w", name, ns, err)
	}
	return err
}
