package workspace

import (
	"context"
	"strconv"
)

// Facts are what the Worktree status reports about a checkout.
type Facts struct {
	Branch string `json:"branch,omitempty"`
	Head   string `json:"head,omitempty"`
	Dirty  bool   `json:"dirty"`
	// Unpushed counts commits reachable from HEAD that no origin branch has.
	Unpushed int `json:"unpushed"`
}

// ReadFacts reads the facts of the checkout at path.
func ReadFacts(ctx context.Context, g *Git, path string) (Facts, error) {
	var f Facts
	var err error
	if f.Head, err = g.Run(ctx, path, "rev-parse", "HEAD"); err != nil {
		return f, err
	}
	f.Branch, _ = g.Run(ctx, path, "symbolic-ref", "--quiet", "--short", "HEAD")
	status, err := g.Run(ctx, path, "status", "--porcelain", "--untracked-files=normal")
	if err != nil {
		return f, err
	}
	f.Dirty = status != ""
	n, err := g.Run(ctx, path, "rev-list", "--count", "HEAD", "--not", "--remotes=origin")
	if err != nil {
		return f, err
	}
	f.Unpushed, _ = strconv.Atoi(n)
	return f, nil
}
