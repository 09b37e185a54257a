package runner

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shepherd-dev/shepherd/internal/clip"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/agent"
	"github.com/shepherd-dev/shepherd/internal/agenthost"
	"github.com/shepherd-dev/shepherd/internal/modelproxy"
	"github.com/shepherd-dev/shepherd/internal/runnerapi"
	"github.com/shepherd-dev/shepherd/internal/transcript"
	"github.com/shepherd-dev/shepherd/internal/workspace"
)

// RunConfig is everything `runner run` takes: the runner's container in an agent pod, or in a
// checkout pod (ServeOnly).
type RunConfig struct {
	// Workdir is the session's checkout as the agent's container sees it.
	Workdir string
	// AgentHome is the agent's home in its container (CLIs keep conversations under it).
	AgentHome string
	Channel   Channel
	// Listen is the local server's address (DefaultListen).
	Listen string
	// HostAddr is the agent container's host (agenthost.DefaultAddr).
	HostAddr string
	// Volume is what the runner makes ready before the checkout step; nil makes nothing.
	Volume *workspace.Volume
	// StateDir holds the runner's own state (the conversation usage totals), out of the agent's
	// reach; empty keeps none.
	StateDir string
	// PreparedFile keeps the checkout step's outcome for a restarted runner (the step posts it
	// once): a file in the runner's scratch space, an emptyDir that outlives the container but
	// not the pod. Empty keeps none.
	PreparedFile string
	// ServeOnly serves the local server (git for the checkout step) until ctx ends, with no
	// session: a checkout pod's runner.
	ServeOnly bool
	// Model configures the model proxy; nil serves none.
	Model *ModelConfig
	// GitPath of git for the runner's own repositories (the mirror, the spares).
	GitPath string
	// PollWait is how long one long poll for messages waits; default 30s.
	PollWait time.Duration
	// Debounce is the least time between two coalesced reports; default 1s.
	Debounce time.Duration
	// Heartbeat is the interval of reports sent without a change; default 30s.
	Heartbeat time.Duration
	// StopGrace is how long the agent gets between SIGTERM and SIGKILL; default 10s.
	StopGrace time.Duration
	// PublishRetry is the first wait before a failed publish is tried again, doubling up to
	// 2 minutes; default 5s.
	PublishRetry time.Duration
	// Stdout receives the readable transcript (kubectl logs); Stderr the agent's stderr and the
	// runner's notes.
	Stdout, Stderr io.Writer
	// RawOutput, when set, receives the agent CLI's own output as it printed it (tests, and
	// debugging a CLI release whose output changed); the transcript is made from it either way.
	RawOutput io.Writer
	// Spares, when set, are the Project's spare worktrees this runner tops up once its agent has
	// started (workspace.FillSpares), so that the next session claims one.
	Spares *workspace.Spares
	// SpareGrace is how long a stopping runner lets a spare being made finish (a spare cut short
	// is removed by the next fill, its work lost); default 15s, within the pod's 30s grace.
	SpareGrace time.Duration
	// OnListen, when set, hears the local server's address once it listens (tests).
	OnListen func(addr string)
}

// InterruptedPrompt resumes a conversation whose turn was cut short when its pod went away.
const InterruptedPrompt = "Your previous run was interrupted before it finished (the pod running you was replaced). " +
	"Continue the task from where you left off."

func (c *RunConfig) defaults() {
	if c.PollWait == 0 {
		c.PollWait = 30 * time.Second
	}
	if c.Debounce == 0 {
		c.Debounce = time.Second
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = 30 * time.Second
	}
	if c.StopGrace == 0 {
		c.StopGrace = 10 * time.Second
	}
	if c.PublishRetry == 0 {
		c.PublishRetry = 5 * time.Second
	}
	if c.SpareGrace == 0 {
		c.SpareGrace = 15 * time.Second
	}
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.HostAddr == "" {
		c.HostAddr = agenthost.DefaultAddr
	}
	if c.Stdout == nil {
		c.Stdout = os.Stdout
	}
	if c.Stderr == nil {
		c.Stderr = os.Stderr
	}
}

// runner holds one `runner run`.
type runner struct {
	cfg RunConfig
	// mounts is what PrepareMounts did first (the agent's containers may start from then on),
	// mountsErr why it failed; prepareVolume finishes the volume from there.
	mounts    workspace.VolumeResult
	mountsErr error
	// fresh are the facts the checkout step just posted, until the first turn used them.
	fresh  *workspace.Facts
	client *runnerapi.Client
	local  *Local
	host   *agenthost.Client
	// loops counts repeated tool failures and turns without a change.
	loops loopWatch
	// modelProxy is the model API proxy, when the Project has one.
	modelProxy *modelproxy.Proxy
	// localAddr is the local server's address, the agent's base URL for git and the model API.
	localAddr string
	task      *runnerapi.Task
	adapter   agent.Agent
	// git runs in the agent's container, on its checkout; localGit here, on the mirror and spares.
	git      *workspace.Git
	localGit *workspace.Git
	// agentStateDir is the agent's state dir in its container (Aider's chat history).
	agentStateDir string
	rep           *reporter
	// tr is the session's transcript: on the volume, in the pod's log, streamed to the manager.
	tr *transcriber
	// sessionID is the agent's conversation id; turns counts turns run by this process.
	sessionID string
	model     string
	turns     int
	pr        *runnerapi.PullRequestResult
	// publishErr is why the last publish failed (the push, or asking for the pull request);
	// empty when everything is published. While set, deliverMessages retries the publish at
	// nextPublish, backing off by publishBackoff: a forge or a manager that was briefly away
	// (a manager restart, a rate limit) must not leave the agent's work unpushed until the next
	// message, which may never come.
	publishErr     string
	nextPublish    time.Time
	publishBackoff time.Duration
	// prPending says commits were pushed and the pull request not asked for since.
	prPending bool
	// spares starts the fill of the spare worktrees once; sparesDone is closed when it ended.
	spares       sync.Once
	sparesDone   chan struct{}
	sparesCancel context.CancelFunc
}

// publishRetryMax bounds the wait between two tries of a failed publish (RunConfig.PublishRetry
// is the first).
const publishRetryMax = 2 * time.Minute

// Run runs the runner's container until the agent exits abnormally or ctx ends (the pod is
// stopping). It returns the exit code the runner should exit with: the agent's when it crashed,
// 0 on a stop. The agent's container gets the same code (its host exits with it).
func Run(ctx context.Context, cfg RunConfig) (int, error) {
	cfg.defaults()
	if !cfg.Channel.Enabled() {
		return 1, fmt.Errorf("run needs the manager URL")
	}
	client, err := cfg.Channel.Client()
	if err != nil {
		return 1, err
	}
	local, err := NewLocal(cfg.Channel)
	if err != nil {
		return 1, err
	}
	var model *modelproxy.Proxy
	// carried opens the model proxy to the agent once the earlier totals are carried (below).
	carried := make(chan struct{})
	markCarried := sync.OnceFunc(func() { close(carried) })
	defer markCarried()
	// The proxy counts from the start; its counts reach the manager once the reporter exists.
	var meterTo atomic.Pointer[reporter]
	if cfg.Model != nil {
		if model, err = cfg.Model.proxy(func(u modelproxy.Usage) {
			saveMetered(cfg.StateDir, u, cfg.Stderr)
			if rep := meterTo.Load(); rep != nil {
				rep.setMetered(u)
			}
		}); err != nil {
			return 1, err
		}
		local.Model = model
		local.ModelReady = carried
	}
	addr, stopLocal, err := local.Serve(ctx, cfg.Listen)
	if err != nil {
		return 1, err
	}
	defer stopLocal()
	if cfg.OnListen != nil {
		cfg.OnListen(addr.String())
	}
	r := &runner{cfg: cfg, client: client, local: local, host: agenthost.NewClient(cfg.HostAddr), localAddr: addr.String(),
		localGit: LocalGit(cfg.GitPath, cfg.Stderr), modelProxy: model, sparesDone: make(chan struct{})}
	r.git = HostGit(r.host)
	if cfg.Volume != nil {
		// First of all: what the agent's containers mount (a spare claimed, the directories
		// made). The runner container's postStart hook returns on it, and the kubelet starts
		// those containers while the runner fetches its task and the mirror.
		r.mounts, r.mountsErr = workspace.PrepareMounts(ctx, *cfg.Volume)
		local.SetMounted() // a failure too: the checkout step then reads and reports it
	}
	if cfg.ServeOnly {
		// A failure is noted and served to the checkout step, which reports it.
		_ = r.prepareVolume(ctx)
		<-ctx.Done()
		return 0, nil
	}
	if err := retry(ctx, "get task", func() error {
		var err error
		r.task, err = client.Task(ctx)
		return err
	}); err != nil {
		return 1, err
	}
	local.SetBranch(r.task.Branch)
	var custom *agent.Custom
	if c := r.task.Agent.Custom; c != nil {
		custom = &agent.Custom{Command: c.Command, Output: c.Output}
	}
	if r.adapter, err = agent.ForTask(r.task.Agent.Type, custom); err != nil {
		return 1, err
	}
	r.rep = newReporter(client, r.task, cfg.Debounce, cfg.Heartbeat, cfg.Stderr)
	if model != nil {
		// Totals continue from the session's earlier pods (the manager's last word), so that a
		// new pod or a restarted runner neither loses nor counts twice what was reported.
		if m := carriedUsage(r.task.Usage.Metered, loadMetered(cfg.StateDir)); m != nil {
			if err := model.Carry(*m); err != nil {
				fmt.Fprintf(cfg.Stderr, "shepherd-runner: the model usage carried over was refused: %v\n", err)
			}
		}
		meterTo.Store(r.rep)
		r.rep.setMetered(model.Usage())
		markCarried()
	}
	r.tr = newTranscriber(client, cfg.StateDir, cfg.Stdout, cfg.Stderr)
	repCtx, stopReports := context.WithCancel(context.WithoutCancel(ctx))
	repDone := make(chan struct{}, 2)
	go func() { defer func() { repDone <- struct{}{} }(); r.rep.loop(repCtx) }()
	go func() { defer func() { repDone <- struct{}{} }(); r.tr.loop(repCtx) }()
	defer r.waitSpares()
	defer func() {
		// Deliver the last reports (the exit, say) and transcript entries even when ctx is
		// already done.
		flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		r.rep.flush(flushCtx)
		stopReports()
		<-repDone
		<-repDone
		r.tr.flush(flushCtx)
		r.tr.close()
		cancel()
	}()
	if err := r.prepareVolume(ctx); err != nil {
		r.rep.setActivity(agentsv1alpha1.ActivityExited, "", err.Error(), ptrInt32(1))
		// The checkout step reads why from the local server and ends with it; then the agent's
		// container ends too (the caller makes its host exit), and so the pod.
		select {
		case <-r.local.Prepared():
		case <-ctx.Done():
		case <-time.After(time.Minute):
		}
		return 1, err
	}
	code, err := r.start(ctx)
	switch {
	case ctx.Err() != nil:
		// Stopped while starting: a stop, not a failure to start.
		code, err = r.stopped()
	case err == nil:
		code, err = r.loop(ctx)
	}
	// The agent's container ends with the runner's verdict (the pod's phase says it).
	exitCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	_ = r.host.Exit(exitCtx, code)
	cancel()
	return code, err
}

// prepareVolume makes what the checkout step needs, then lets it go on (or fail with why).
func (r *runner) prepareVolume(ctx context.Context) error {
	if r.cfg.Volume == nil {
		r.local.SetReady(workspace.VolumeResult{}, nil)
		return nil
	}
	v := *r.cfg.Volume
	v.Remote = LocalGitURL(r.localAddr, r.repository())
	res, err := r.mounts, r.mountsErr
	if err == nil {
		res, err = workspace.FinishVolume(ctx, r.localGit, v, res)
	}
	if err != nil {
		err = fmt.Errorf("prepare the volume: %w", err)
		r.notef("%v", err)
	} else if res.Claimed {
		r.notef("moved a spare checkout to %s", v.Checkout)
	}
	r.local.SetReady(res, err)
	return err
}

func (r *runner) repository() string {
	if r.task != nil {
		return r.task.Repository
	}
	return ""
}

// start waits for the checkout step's outcome (it runs beside the agent's container) and for
// the agent's container, then finds the checkout's state dir through it.
func (r *runner) start(ctx context.Context) (int, error) {
	var out Prepared
	if saved, ok := r.loadPrepared(); ok {
		// A restarted runner: the step posted to the runner before it.
		out = saved
	} else {
		select {
		case out = <-r.local.Prepared():
			r.savePrepared(out)
			r.fresh = &out.Facts
		case <-ctx.Done():
			return r.stopped()
		}
	}
	if out.Error != "" {
		msg := "the checkout step failed: " + out.Error
		r.rep.setActivity(agentsv1alpha1.ActivityExited, "", msg, ptrInt32(1))
		return 1, errors.New(msg)
	}
	r.reportPrepared(out.Result)
	if err := r.host.WaitReady(ctx); err != nil {
		if ctx.Err() != nil {
			return r.stopped()
		}
		return 1, err
	}
	// The checkout step said where the git directory is and which branch it checked out: what
	// git would say through the host, from the same (the agent's) domain, without two more git
	// processes on the way to the agent's start.
	gitDir, branch := out.GitDir, out.Facts.Branch
	if gitDir == "" {
		var err error
		if gitDir, err = r.git.Run(ctx, r.cfg.Workdir, "rev-parse", "--absolute-git-dir"); err != nil {
			return 1, fmt.Errorf("the workdir is not a prepared checkout: %w", err)
		}
	}
	r.agentStateDir = filepath.Join(workspace.StateDir(gitDir), "agent")
	if _, err := r.host.Dir(ctx, r.agentStateDir); err != nil {
		return 1, fmt.Errorf("create agent state dir: %w", err)
	}
	if branch == "" {
		branch, _ = r.git.Run(ctx, r.cfg.Workdir, "symbolic-ref", "--quiet", "--short", "HEAD")
	}
	if branch != r.task.Branch {
		return 1, fmt.Errorf("the checkout is on %q, not on the session's branch %q; run prepare first", branch, r.task.Branch)
	}
	r.sessionID, r.pr = r.task.AgentSessionID, r.task.PullRequest
	return 0, nil
}

// savePrepared keeps the checkout step's outcome for a restarted runner.
func (r *runner) savePrepared(out Prepared) {
	if r.cfg.PreparedFile == "" {
		return
	}
	raw, err := json.Marshal(out)
	if err == nil {
		err = os.WriteFile(r.cfg.PreparedFile, raw, 0o600)
	}
	if err != nil {
		r.notef("could not keep the checkout step's outcome (a restarted runner would wait for it): %v", err)
	}
}

// loadPrepared reads what savePrepared kept, if anything.
func (r *runner) loadPrepared() (Prepared, bool) {
	var out Prepared
	if r.cfg.PreparedFile == "" {
		return out, false
	}
	raw, err := os.ReadFile(r.cfg.PreparedFile)
	if err != nil || json.Unmarshal(raw, &out) != nil {
		return out, false
	}
	return out, true
}

// reportPrepared reports the checkout step's result, as the runner's own report.
func (r *runner) reportPrepared(res workspace.Result) {
	r.rep.update(func() {
		r.rep.workspace = workspaceReport(res.Facts, res.Path)
		r.rep.workspace.Restored, r.rep.workspace.FullFetch = res.Restored, res.FullFetch
		r.rep.workspace.Setup = &runnerapi.SetupReport{State: res.Setup.State, FailedCommand: res.Setup.FailedCommand,
			Error: clip.To(res.Setup.Error, 4096)}
	})
}

// fillSpares tops up the Project's spare worktrees in the background, once per runner: after the
// agent started, so that the fill never delays it. The fill outlives ctx: when Run ends it gets
// SpareGrace more (waitSpares), so a session stopped soon after its start still leaves a whole
// spare behind.
func (r *runner) fillSpares(ctx context.Context) {
	r.spares.Do(func() {
		if r.cfg.Spares == nil {
			close(r.sparesDone)
			return
		}
		var fillCtx context.Context
		fillCtx, r.sparesCancel = context.WithCancel(context.WithoutCancel(ctx))
		go func() {
			defer close(r.sparesDone)
			start := time.Now()
			spares := *r.cfg.Spares
			spares.Remote = LocalGitURL(r.localAddr, r.repository())
			made, err := workspace.FillSpares(fillCtx, r.localGit, spares)
			switch {
			case err != nil:
				r.notef("spare worktrees: %v (made %d)", err, made)
			case made > 0:
				r.notef("made %d spare worktree(s) for the next sessions in %s", made, time.Since(start).Round(time.Millisecond))
			}
		}()
	})
}

// waitSpares lets a fill started by fillSpares finish, for SpareGrace at most, then stops it.
func (r *runner) waitSpares() {
	r.spares.Do(func() { close(r.sparesDone) }) // never started: nothing to wait for
	select {
	case <-r.sparesDone:
	case <-time.After(r.cfg.SpareGrace):
		r.notef("stopping the spare worktree fill after %s; the next fill removes what it left", r.cfg.SpareGrace)
		r.sparesCancel()
		<-r.sparesDone
	}
}

func (r *runner) notef(format string, args ...any) {
	fmt.Fprintf(r.cfg.Stderr, "shepherd-runner: "+format+"\n", args...)
}

func (r *runner) restored() bool {
	if r.sessionID != "" {
		return true
	}
	if r.adapter.Capabilities().ResumeNeedsSessionID {
		return false
	}
	// Aider's conversation is its chat history in the state dir.
	entries, _ := r.host.Dir(context.Background(), r.agentStateDir)
	return len(entries) > 0
}

func (r *runner) loop(ctx context.Context) (int, error) {
	switch {
	case !r.restored():
		prompt := r.task.Prompt
		if r.task.Agent.ExtraInstructions != "" {
			prompt += "\n\n" + r.task.Agent.ExtraInstructions
		}
		if code, done, err := r.turn(ctx, prompt, false, nil); done {
			return code, err
		}
	case r.task.LastActivity == agentsv1alpha1.ActivityActive:
		r.notef("resuming conversation %s, whose last turn was interrupted", r.sessionID)
		if code, done, err := r.turn(ctx, InterruptedPrompt, true, nil); done {
			return code, err
		}
	default:
		r.notef("restored conversation %s; waiting for messages", r.sessionID)
		r.fillSpares(ctx)
	}
	return r.deliverMessages(ctx)
}

// deliverMessages long-polls for follow-ups and runs each as a resumed turn, in order.
func (r *runner) deliverMessages(ctx context.Context) (int, error) {
	backoff := time.Second
	for {
		if ctx.Err() != nil {
			return r.stopped()
		}
		wait := r.cfg.PollWait
		if r.publishErr != "" {
			d := time.Until(r.nextPublish)
			if d <= 0 {
				r.republish(ctx)
				continue
			}
			wait = min(wait, d.Round(time.Millisecond)+time.Millisecond)
		}
		msgs, err := r.client.Pending(ctx, wait)
		if err != nil {
			if ctx.Err() != nil {
				return r.stopped()
			}
			r.notef("polling messages failed (retrying in %s): %v", backoff, err)
			select {
			case <-ctx.Done():
				return r.stopped()
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 30*time.Second)
			continue
		}
		backoff = time.Second
		if len(msgs) == 0 {
			continue
		}
		m := msgs[0]
		ack := func() {
			if err := retry(ctx, "ack message", func() error { return r.client.Ack(ctx, m.ID) }); err != nil {
				r.notef("acknowledging message %s failed: %v", m.ID, err)
			}
		}
		r.notef("delivering message %s as a new turn", m.ID)
		if code, done, err := r.turn(ctx, m.Text, true, ack); done {
			return code, err
		}
	}
}

// republish retries a failed publish between polls; on success the session is Ready again.
func (r *runner) republish(ctx context.Context) {
	r.notef("retrying the publish that failed (%s)", r.publishErr)
	if err := r.publish(ctx, "", &turnState{}); err != nil {
		r.rep.setActivity(agentsv1alpha1.ActivityBlocked, "", publishBlocked(err), nil)
		return
	}
	r.notef("published after a retry")
	r.rep.setActivity(agentsv1alpha1.ActivityReady, "", "", nil)
}

// publishBlocked is the Blocked message for a publish that failed and will be retried.
func publishBlocked(err error) string {
	return clip.To(err.Error(), 3000) + " (the runner retries it)"
}

func (r *runner) stopped() (int, error) {
	r.rep.setActivity(agentsv1alpha1.ActivityExited, "", "the runner was stopped", nil)
	return 0, nil
}

// turnState gathers one turn's events.
type turnState struct {
	question string
	result   *agent.Event
	denied   []string
	errors   []string
	usage    agent.Usage
}

// turn runs one agent process. done says the runner must end with code: the agent crashed, or
// the runner is stopping.
func (r *runner) turn(ctx context.Context, prompt string, resume bool, started func()) (code int, done bool, err error) {
	caps := r.adapter.Capabilities()
	if resume && caps.ResumeNeedsSessionID && r.sessionID == "" {
		r.notef("the agent never reported a conversation id; starting a new conversation for this turn")
		resume = false
	}
	spec, err := r.adapter.Command(agent.Turn{
		Prompt: prompt, Resume: resume, SessionID: r.sessionID, Model: r.task.Agent.Model,
		Permission: r.task.Agent.PermissionMode, ExtraArgs: r.task.Agent.ExtraArgs, Workdir: r.cfg.Workdir, StateDir: r.agentStateDir,
		Home: r.cfg.AgentHome, ModelAPI: r.modelEndpoint(),
	})
	if err != nil {
		return 1, true, err
	}
	for _, d := range spec.Dirs {
		if _, err := r.host.Dir(ctx, d); err != nil {
			return 1, true, fmt.Errorf("make %s in the agent's container: %w", d, err)
		}
	}
	var headBefore, stateBefore string
	if f := r.fresh; f != nil && !f.Dirty && f.Head != "" {
		// The first turn on a checkout the checkout step has just read, clean, and nothing has
		// touched since: what git would say, without four git processes (two of them reading
		// every file of the checkout) before the agent starts.
		headBefore, stateBefore = f.Head, digestOf(f.Head, "", "")
	} else {
		headBefore, _ = r.git.Run(ctx, r.cfg.Workdir, "rev-parse", "HEAD")
		stateBefore = checkoutDigest(ctx, r.git, r.cfg.Workdir)
	}
	r.fresh = nil
	r.rep.setActivity(agentsv1alpha1.ActivityActive, "", "", nil)
	r.tr.startTurn(prompt)

	// The spares are made while the agent works (the first turn's start is the moment: from
	// then on the fill delays nobody); a stop right now still leaves whole spares behind.
	r.fillSpares(ctx)
	// The turn runs in the agent's container, as the agent; cancelling ctx (a stop) makes the
	// host send SIGTERM to its process group, SIGKILL after the stop grace.
	proc, err := r.host.Start(ctx, agenthost.ExecRequest{
		Args: append([]string{spec.Name}, spec.Args...), Dir: r.cfg.Workdir, Env: spec.Env,
		Stdin: []byte(spec.Stdin), Grace: r.cfg.StopGrace,
	})
	if err != nil {
		if ctx.Err() != nil {
			code, err := r.stopped()
			return code, true, err
		}
		msg := fmt.Sprintf("could not start %s: %v", spec.Name, err)
		r.rep.setActivity(agentsv1alpha1.ActivityExited, "", msg, ptrInt32(127))
		return 127, true, errors.New(msg)
	}
	if started != nil {
		started()
	}

	tail := &workspace.Tail{Max: 20}
	st := &turnState{}
	parser := r.adapter.NewParser()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(io.MultiWriter(r.cfg.Stderr, tail), proc.Stderr)
	}()
	br := bufio.NewReaderSize(proc.Stdout, 64<<10)
	for {
		line, err := agent.ReadLine(br)
		if len(line) > 0 || err == nil {
			if r.cfg.RawOutput != nil {
				_, _ = r.cfg.RawOutput.Write(append(line, '\n'))
			}
			_, _ = tail.Write(append(line, '\n'))
			for _, ev := range parser.Line(line) {
				r.handle(ev, st)
			}
		}
		if err != nil {
			break
		}
	}
	wg.Wait()
	exit, waitErr := proc.Wait()
	for _, ev := range parser.Finish() {
		r.handle(ev, st)
	}
	var startErr *agenthost.StartError
	switch {
	case errors.As(waitErr, &startErr):
		msg := fmt.Sprintf("could not start %s: %s", spec.Name, startErr.Msg)
		r.rep.setActivity(agentsv1alpha1.ActivityExited, "", msg, ptrInt32(127))
		return 127, true, errors.New(msg)
	case proc.Stopped() || ctx.Err() != nil:
		// The pod is going away: the agent was stopped, it did not crash.
		code, err := r.stopped()
		return code, true, err
	case waitErr != nil:
		return 1, true, fmt.Errorf("wait for agent: %w", waitErr)
	}
	r.turns++
	r.loops.turnEnded(stateBefore, checkoutDigest(ctx, r.git, r.cfg.Workdir))
	loop := r.loops.report()
	r.rep.update(func() {
		r.rep.usage.Add(st.usage)
		r.rep.turns++
		r.rep.loopReport = loop
		if st.result != nil && st.result.Text != "" {
			r.rep.summary = clip.To(st.result.Text, 4096)
		}
	})
	pubErr := r.publish(ctx, headBefore, st)
	if exit != 0 {
		msg := fmt.Sprintf("agent exited with code %d", exit)
		if st.result != nil && st.result.IsError && st.result.Text != "" {
			msg += ": " + st.result.Text
		}
		msg += "\n" + tail.String()
		r.rep.setActivity(agentsv1alpha1.ActivityExited, "", msg, ptrInt32(int32(exit)))
		return exit, true, nil
	}
	switch {
	case r.budgetSpent() != "":
		r.rep.setActivity(agentsv1alpha1.ActivityBlocked, "", r.budgetSpent(), nil)
	case st.question != "":
		r.rep.setActivity(agentsv1alpha1.ActivityWaitingForInput, st.question, "", nil)
	case pubErr != nil:
		r.rep.setActivity(agentsv1alpha1.ActivityBlocked, "", publishBlocked(pubErr), nil)
	case len(st.denied) > 0:
		r.rep.setActivity(agentsv1alpha1.ActivityBlocked, "", strings.Join(st.denied, "\n"), nil)
	case st.result != nil && st.result.IsError:
		r.rep.setActivity(agentsv1alpha1.ActivityBlocked, "", st.result.Text, nil)
	case st.result == nil:
		r.rep.setActivity(agentsv1alpha1.ActivityReady, "", "the turn ended without a result: "+strings.Join(st.errors, "; "), nil)
	default:
		r.rep.setActivity(agentsv1alpha1.ActivityReady, "", "", nil)
	}
	return 0, false, nil
}

// handle folds one event into the turn, the transcript and the reports.
func (r *runner) handle(ev agent.Event, st *turnState) {
	if e, ok := transcript.FromEvent(ev); ok {
		r.tr.add(e)
	}
	if ev.Kind == agent.KindToolUse || ev.Kind == agent.KindToolResult {
		r.loops.event(ev)
		if ev.Kind == agent.KindToolResult && ev.IsError {
			loop := r.loops.report()
			r.rep.update(func() { r.rep.loopReport = loop })
		}
	}
	switch ev.Kind {
	case agent.KindActivity, agent.KindToolUse, agent.KindToolResult, agent.KindText:
		if r.rep.state() == agentsv1alpha1.ActivityBlocked {
			r.rep.setActivity(agentsv1alpha1.ActivityActive, "", "", nil)
		} else {
			r.rep.touch()
		}
	case agent.KindSession:
		if (ev.SessionID != "" && ev.SessionID != r.sessionID) || (ev.Model != "" && ev.Model != r.model) {
			if ev.SessionID != "" {
				r.sessionID = ev.SessionID
			}
			if ev.Model != "" {
				r.model = ev.Model
			}
			r.rep.update(func() { r.rep.agentInfo = runnerapi.AgentReport{SessionID: r.sessionID, Model: r.model} })
			r.tr.note("%s", conversationNote(r.sessionID, r.model))
		}
	case agent.KindQuestion:
		st.question = ev.Text
	case agent.KindTurnResult:
		e := ev
		st.result = &e
	case agent.KindUsage:
		if ev.Usage == nil {
			break
		}
		u := *ev.Usage
		if ev.Cumulative {
			id := ev.SessionID
			if id == "" {
				id = r.sessionID
			}
			var err error
			if u, err = newConversationTotals(r.cfg.StateDir).share(id, u); err != nil {
				r.notef("recording the conversation's usage totals failed: %v", err)
			}
		}
		st.usage.Add(u)
	case agent.KindError:
		switch {
		case ev.Retrying:
			r.rep.setActivity(agentsv1alpha1.ActivityBlocked, "", ev.Text, nil)
		case ev.Denied:
			st.denied = append(st.denied, ev.Text)
		default:
			st.errors = append(st.errors, ev.Text)
			r.notef("%s", ev.Text)
		}
	}
}

// publish pushes new commits and asks for the pull request. Failures are reported, not fatal:
// the commits stay in the checkout, the session shows Blocked with the reason, and the runner
// retries between polls (deliverMessages) and after the next turn. It returns nil when there is
// nothing left to publish.
func (r *runner) publish(ctx context.Context, headBefore string, st *turnState) (err error) {
	defer func() {
		if err == nil {
			r.publishErr, r.publishBackoff = "", 0
			return
		}
		r.publishErr = err.Error()
		r.publishBackoff = min(max(r.publishBackoff*2, r.cfg.PublishRetry), publishRetryMax)
		r.nextPublish = time.Now().Add(r.publishBackoff)
		r.notef("%v; retrying in %s", err, r.publishBackoff)
	}()
	facts, err := workspace.ReadFacts(ctx, r.git, r.cfg.Workdir)
	if err != nil {
		if _, serr := os.Stat(r.cfg.Workdir); errors.Is(serr, os.ErrNotExist) {
			// Deleted behind Shepherd's back: the Worktree says Missing.
			r.rep.update(func() { r.rep.workspace = &runnerapi.WorkspaceReport{Path: r.cfg.Workdir, Missing: true} })
			return fmt.Errorf("the checkout %s is gone (deleted outside Shepherd): restart the session's pod to make it again from the branch", r.cfg.Workdir)
		}
		return fmt.Errorf("reading the checkout failed: %w", err)
	}
	r.rep.update(func() { r.rep.workspace = workspaceReport(facts, r.cfg.Workdir) })
	if facts.Unpushed > 0 {
		if facts.Head == headBefore {
			r.notef("%d commit(s) from an earlier turn are not pushed yet; pushing them now", facts.Unpushed)
		}
		if err := r.push(ctx); err != nil {
			st.errors = append(st.errors, "push failed: "+err.Error())
			return fmt.Errorf("push failed: %w", err)
		}
		facts, _ = workspace.ReadFacts(ctx, r.git, r.cfg.Workdir)
		r.tr.note("pushed %s to %s", shortHash(facts.Head), r.task.Branch)
		r.rep.update(func() {
			r.rep.workspace = workspaceReport(facts, r.cfg.Workdir)
			r.rep.push = &runnerapi.PushReport{Branch: r.task.Branch, Head: facts.Head}
		})
		r.prPending = true
	}
	if !r.prPending {
		return nil
	}
	summary := ""
	if st.result != nil {
		summary = st.result.Text
	}
	req := runnerapi.PullRequestRequest{Branch: r.task.Branch, Base: r.task.BaseBranch, Head: facts.Head,
		Title: prTitle(r.task), Body: prBody(r.task, summary)}
	var pr *runnerapi.PullRequestResult
	err = retry(ctx, "open pull request", func() error {
		var err error
		pr, err = r.client.OpenPullRequest(ctx, req)
		return err
	})
	if err != nil {
		return fmt.Errorf("asking for the pull request failed: %w", err)
	}
	r.pr, r.prPending = pr, false
	verb := "updated"
	if pr.Created {
		verb = "opened"
	}
	r.notef("pull request #%d %s: %s", pr.Number, verb, pr.URL)
	r.tr.note("pull request #%d %s: %s", pr.Number, verb, pr.URL)
	return nil
}

func prTitle(t *runnerapi.Task) string {
	title := t.Title
	if title == "" && t.Issue != nil {
		title = t.Issue.Title
	}
	if title == "" {
		title, _, _ = strings.Cut(strings.TrimSpace(t.Prompt), "\n")
	}
	if title == "" {
		title = "Changes on " + t.Branch
	}
	return clip.To(title, 256)
}

func prBody(t *runnerapi.Task, summary string) string {
	var b strings.Builder
	if summary != "" {
		b.WriteString(summary)
		b.WriteString("\n\n")
	}
	if t.Issue != nil && t.Issue.ID != "" {
		ref := t.Issue.ID
		if !strings.HasPrefix(ref, "#") && !strings.Contains(ref, "-") {
			ref = "#" + ref
		}
		fmt.Fprintf(&b, "Resolves %s\n\n", ref)
	}
	b.WriteString("---\nOpened by Shepherd for the agent's work on this branch.")
	return clip.To(b.String(), 65536)
}

// push pushes the checkout's HEAD to the session's branch through the runner's git endpoint
// (origin is set to it again first: the agent may have changed it, which would only lose its
// own push), so origin's remote-tracking branch moves and the unpushed count with it.
func (r *runner) push(ctx context.Context) error {
	origin := LocalGitURL(r.localAddr, r.repository())
	if _, err := r.git.Run(ctx, r.cfg.Workdir, "config", "remote.origin.url", origin); err != nil {
		return err
	}
	_, _ = r.git.Run(ctx, r.cfg.Workdir, "config", "--unset-all", "remote.origin.pushurl")
	_, err := r.git.Run(ctx, r.cfg.Workdir, "push", "--porcelain", "origin", "HEAD:refs/heads/"+r.task.Branch)
	return err
}

func ptrInt32(v int32) *int32 { return &v }

func shortHash(h string) string { return h[:min(len(h), 12)] }

// conversationNote is the transcript's line for the agent's conversation and model, said once
// when either is first seen or changes (a resumed turn names the same ones and says nothing).
func conversationNote(sessionID, model string) string {
	switch {
	case sessionID == "":
		return "model " + model
	case model == "":
		return "conversation " + sessionID
	}
	return "conversation " + sessionID + ", model " + model
}
