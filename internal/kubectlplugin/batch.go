package kubectlplugin

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/printers"
)

// IssuesPath is a Project's tracker issues in the aggregated API (internal/ui).
func IssuesPath(ns, project string) string {
	return UIPrefix + "/namespaces/" + url.PathEscape(ns) + "/projects/" + url.PathEscape(project) + "/issues"
}

// issueList is the issues endpoint's answer (ui.IssueList).
type issueList struct {
	Items []struct {
		ID      string `json:"id"`
		Session string `json:"session"`
		Title   string `json:"title"`
	} `json:"items"`
	Truncated bool `json:"truncated"`
}

// maxBatchLimit is the issues endpoint's bound (ui.MaxIssueLimit).
const maxBatchLimit = 250

type batchOptions struct {
	labels []string
	limit  int
	agent  string
	dryRun bool
}

func newBatch(o *Options) *cobra.Command {
	b := &batchOptions{}
	cmd := &cobra.Command{
		Use:   "batch PROJECT --label L [--label L2]",
		Short: "Start a session on each open issue of a Project's tracker that carries every label",
		Long: `Start a session on each open issue of a Project's tracker that carries every label given.

Shepherd's manager reads the issues with the Project's own tracker and credentials (this plugin
holds none); it needs get on projects/issues (the edit role). Each issue gets the session that
'spawn --issue' and the Project's backlog would make for it (PROJECT-ISSUE), so running batch
twice starts nothing twice: a session that exists is left as it is.`,
		Example: `  kubectl shepherd batch widgets --label agent
  kubectl shepherd batch widgets --label agent --label good-first-issue --limit 10 --dry-run`,
		Args: cobra.ExactArgs(1),
		RunE: run(o, func(ctx context.Context, e *env, args []string) error { return b.run(ctx, e, args[0]) }),
	}
	cmd.Flags().StringArrayVar(&b.labels, "label", nil, "A label the issues must carry (repeat for more; all must match).")
	cmd.Flags().IntVar(&b.limit, "limit", 50, fmt.Sprintf("At most this many issues (1 to %d).", maxBatchLimit))
	cmd.Flags().StringVar(&b.agent, "agent", "", "The agent type of the new sessions (claude-code, codex, opencode, aider); default the Project's.")
	cmd.Flags().BoolVar(&b.dryRun, "dry-run", false, "List the issues and the sessions batch would start, and start none.")
	return cmd
}

func (b *batchOptions) run(ctx context.Context, e *env, project string) error {
	if err := e.requireNamespace(); err != nil {
		return err
	}
	if len(b.labels) == 0 {
		return fmt.Errorf("pass at least one --label: batch starts sessions on the open issues that carry every label given")
	}
	if b.limit < 1 || b.limit > maxBatchLimit {
		return fmt.Errorf("--limit must be from 1 to %d", maxBatchLimit)
	}
	req := e.kube.Discovery().RESTClient().Get().AbsPath(IssuesPath(e.ns, project)).Param("limit", strconv.Itoa(b.limit))
	for _, l := range b.labels {
		req = req.Param("label", l)
	}
	// Do, not DoRaw: Result.Error decodes the server's Status, so its message reaches the user.
	res := req.Do(ctx)
	if err := res.Error(); err != nil {
		return issuesError(err, e.ns, project)
	}
	body, _ := res.Raw()
	var list issueList
	if err := json.Unmarshal(body, &list); err != nil {
		return fmt.Errorf("read the issues: %w", err)
	}
	tw := printers.GetNewTabWriter(e.out)
	fmt.Fprintln(tw, "ISSUE\tSESSION\tRESULT\tTITLE")
	var made, existed int
	for _, is := range list.Items {
		result := "would create"
		switch {
		case b.dryRun:
			if _, err := e.sessions(e.ns).Get(ctx, is.Session, metav1.GetOptions{}); err == nil {
				result = "exists"
				existed++
			} else if !apierrors.IsNotFound(err) {
				return err
			} else {
				made++
			}
		default:
			created, err := e.createSession(ctx, is.Session, project, map[string]string{"issue": is.ID}, b.agent)
			if err != nil {
				_ = tw.Flush()
				return fmt.Errorf("issue %s: %w", is.ID, err)
			}
			if created {
				result = "created"
				made++
			} else {
				result = "exists"
				existed++
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", issueRef(is.ID), is.Session, result, truncate(oneLine(is.Title), 60))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	verb := "created"
	if b.dryRun {
		verb = "to create"
	}
	summary := fmt.Sprintf("%d issues labelled %s: %d sessions %s, %d exist", len(list.Items), strings.Join(b.labels, ", "), made, verb, existed)
	if list.Truncated {
		summary += fmt.Sprintf("; the tracker may hold more than --limit %d", b.limit)
	}
	_, err := fmt.Fprintln(e.opts.Streams.ErrOut, summary)
	return err
}

// issueRef is an issue as people write it: #42 for a number, ENG-123 as it is.
func issueRef(id string) string {
	if _, err := strconv.Atoi(id); err == nil {
		return "#" + id
	}
	return id
}

// issuesError explains a refused issues request.
func issuesError(err error, ns, project string) error {
	switch {
	case apierrors.IsForbidden(err):
		return fmt.Errorf("forbidden: you may not list the issues of Project %s in namespace %s: it needs get on projects/issues (ui.agents.shepherd.dev) and on the Project, which the edit role gives (%w)", project, ns, err)
	case apierrors.IsNotFound(err):
		return fmt.Errorf("project %s in namespace %s not found, or Shepherd's aggregated API (APIService v1alpha1.ui.agents.shepherd.dev) is not served here: %w", project, ns, err)
	}
	return err
}
