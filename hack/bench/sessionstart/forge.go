package main

import (
	"context"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/test/fakegithub"
	"github.com/shepherd-dev/shepherd/test/gitserver"
	"github.com/shepherd-dev/shepherd/test/scenario"
)

// The forge's repository and the bot's token (valid on the fake only).
const (
	forgeRepo   = "acme/monorepo"
	forgeLogin  = "shepherd-bot"
	forgeToken  = "ghp_fake_bench_session_start"
	forgeSecret = "forge"
)

// agentScenario is the fake agent's one turn: say it runs, then stay busy until the session is
// deleted. Its first line of output, the init event, is the "agent running" signal.
const agentScenario = `{"turns":[{"steps":[{"say":"bench-session-start: the agent runs in its checkout."},{"sleep":"1h"}],"result":"Done."}]}`

// startForge serves the generated repository from the fake GitHub on the node's IP (the
// Projects' forge: API and git, token required) and from a plain git server (the baselines' pods
// clone without credentials). Both serve one copy, hard-linked from the cache: objects and packs
// are never rewritten in place, and nothing here pushes.
func (b *bench) startForge(ctx context.Context, bare string) error {
	ip, err := scenario.NodeIP(ctx, b.env.cl)
	if err != nil {
		return err
	}
	b.nodeIP = ip
	dir := filepath.Join(b.o.work, "forge")
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	gitRoot := filepath.Join(dir, "git")
	if err := linkTree(bare, filepath.Join(gitRoot, forgeRepo+".git")); err != nil {
		return fmt.Errorf("copy the repository to the forge: %w", err)
	}
	gh, err := fakegithub.New(fakegithub.Options{Dir: dir})
	if err != nil {
		return err
	}
	if err := gh.Start(net.JoinHostPort(ip, "0")); err != nil {
		return err
	}
	b.gh = gh
	gh.AddToken(forgeToken, forgeLogin)
	if _, err := gh.CreateRepo(forgeRepo, "main", nil); err != nil { // served as it is
		return err
	}
	b.forgeURL = gh.CloneURL(forgeRepo)
	plain, err := gitserver.New(gitRoot)
	if err != nil {
		return err
	}
	if err := plain.Start(net.JoinHostPort(ip, "0")); err != nil {
		return err
	}
	b.plain = plain
	b.plainURL = plain.URL(forgeRepo)
	b.line("the fake GitHub on %s (git: %s, token required); for the baselines, the same repository at %s", gh.URL(), b.forgeURL, b.plainURL)
	return nil
}

func (b *bench) stopForge() {
	if b.plain != nil {
		_ = b.plain.Close()
	}
	if b.gh != nil {
		_ = b.gh.Close()
	}
	_ = os.RemoveAll(filepath.Join(b.o.work, "forge"))
}

// linkTree copies the directory src to dst with hard links (directories are made anew).
func linkTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		return os.Link(p, target)
	})
}

func (b *bench) createForgeSecret(ctx context.Context) error {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: forgeSecret, Namespace: b.o.namespace},
		StringData: map[string]string{"token": forgeToken}}
	return b.env.cl.Create(ctx, s)
}

// createProject creates a Project on the fake GitHub whose agent is the test image's fake Claude
// Code, in worktree mode (the default), and waits until it is Ready. The mirror is made by its
// first session's prepare step.
func (b *bench) createProject(ctx context.Context, name string) error {
	p := &agentsv1alpha1.Project{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: b.o.namespace}}
	p.Spec.Repository = agentsv1alpha1.RepositorySpec{
		URL: agentsv1alpha1.RepositoryURL(b.forgeURL), DefaultBranch: "main",
		Credentials: &agentsv1alpha1.RepositoryCredentials{SecretRef: &agentsv1alpha1.SecretKeyRef{Name: forgeSecret, Key: "token"}},
	}
	p.Spec.SCM = agentsv1alpha1.SCMSpec{Provider: agentsv1alpha1.SCMGitHub, APIURL: agentsv1alpha1.HTTPURL(b.gh.URL())}
	cpu := b.o.cpu.DeepCopy()
	p.Spec.Agent = agentsv1alpha1.AgentSpec{
		Type: agentsv1alpha1.AgentClaudeCode, Image: testAgentImage, PermissionMode: agentsv1alpha1.PermissionBypass,
		Env:       []agentsv1alpha1.EnvVar{{Name: "FAKEAGENT_SCENARIO_JSON", Value: agentScenario}},
		Resources: &agentsv1alpha1.ResourceRequirements{Requests: agentsv1alpha1.ResourceList{CPU: &cpu}},
	}
	p.Spec.Workspace.Mode = agentsv1alpha1.WorkspaceWorktree
	if err := b.env.cl.Create(ctx, p); err != nil {
		return fmt.Errorf("create Project %s: %w", name, err)
	}
	started := time.Now()
	if err := scenario.WaitProjectReady(ctx, b.env.cl, client.ObjectKeyFromObject(p), 2*time.Minute); err != nil {
		return err
	}
	b.line("Project %s Ready in %.1fs (not measured)", name, time.Since(started).Seconds())
	return nil
}

// setSpares sets the Project's spec.workspace.spareWorktrees.
func (b *bench) setSpares(ctx context.Context, project string, n int) error {
	p := &agentsv1alpha1.Project{ObjectMeta: metav1.ObjectMeta{Name: project, Namespace: b.o.namespace}}
	patch := []byte(fmt.Sprintf(`{"spec":{"workspace":{"spareWorktrees":%d}}}`, n))
	if err := b.env.cl.Patch(ctx, p, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("set spareWorktrees of Project %s: %w", project, err)
	}
	return nil
}
