// Package aider adapts Aider's one-shot message mode:
//
//	aider --message=<prompt> --yes-always --no-pretty --no-stream --no-fancy-input
//	      --chat-history-file <state>/aider.chat.history.md [--restore-chat-history] ...
//
// Aider has no conversation id: a resumed turn restores the conversation from its chat-history
// file, which lives in the checkout's git directory so that it persists with the checkout and
// never dirties the working tree. Aider commits its own edits (auto-commits). Its output is
// plain text; the parser reads the lines aider prints about models, edits, commits, tokens and
// cost, and treats everything else as the assistant's reply.
package aider

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/shepherd-dev/shepherd/internal/clip"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/agent"
)

// Binary is the program name looked up on PATH.
const Binary = "aider"

// HistoryFile is the chat-history file name inside Turn.StateDir.
const HistoryFile = "aider.chat.history.md"

func init() { agent.Register(Adapter{}) }

// Adapter is the aider agent.
type Adapter struct{}

// Type implements agent.Agent.
func (Adapter) Type() agentsv1alpha1.AgentType { return agentsv1alpha1.AgentAider }

// Capabilities implements agent.Agent.
func (Adapter) Capabilities() agent.Capabilities {
	return agent.Capabilities{CanResume: true, AutoCommits: true, ReportsCost: true}
}

// PermissionArgs maps a permission mode to aider flags. Aider only runs shell commands it
// suggests itself, after confirmation: Bypass confirms them (--yes-always), AcceptEdits stops
// suggesting them, ReadOnly switches to ask mode, which answers without editing.
func PermissionArgs(m agentsv1alpha1.PermissionMode) ([]string, error) {
	switch m {
	case "", agentsv1alpha1.PermissionBypass:
		return []string{"--auto-commits"}, nil
	case agentsv1alpha1.PermissionAcceptEdits:
		return []string{"--auto-commits", "--no-suggest-shell-commands"}, nil
	case agentsv1alpha1.PermissionReadOnly:
		return []string{"--chat-mode", "ask", "--no-auto-commits", "--no-suggest-shell-commands"}, nil
	}
	return nil, fmt.Errorf("aider: unknown permission mode %q", m)
}

// Command implements agent.Agent.
func (Adapter) Command(t agent.Turn) (agent.Command, error) {
	perm, err := PermissionArgs(t.Permission)
	if err != nil {
		return agent.Command{}, err
	}
	if t.StateDir == "" {
		return agent.Command{}, fmt.Errorf("aider: a state directory is needed for the chat history")
	}
	args := []string{
		// The = form keeps a prompt that starts with "-" a value, never a flag.
		"--message=" + t.Prompt,
		"--yes-always", "--no-pretty", "--no-stream", "--no-fancy-input",
		"--no-check-update", "--no-show-release-notes", "--analytics-disable", "--no-gitignore",
		"--chat-history-file", filepath.Join(t.StateDir, HistoryFile),
		"--input-history-file", filepath.Join(t.StateDir, "aider.input.history"),
	}
	if t.Resume {
		args = append(args, "--restore-chat-history")
	}
	if t.Model != "" {
		args = append(args, "--model", t.Model)
	}
	args = append(args, perm...)
	margs, env := ModelSettings(t.ModelAPI)
	args = append(args, margs...)
	args = append(args, t.ExtraArgs...)
	return agent.Command{Name: Binary, Args: args, Env: env}, nil
}

// ModelSettings points Aider at the runner's model proxy. Aider talks to models through
// litellm: an OpenAI-compatible base comes from --openai-api-base, Anthropic's from litellm's
// ANTHROPIC_API_BASE (ANTHROPIC_BASE_URL in newer litellm; both are set).
func ModelSettings(m *agent.ModelEndpoint) (args, env []string) {
	switch {
	case m == nil:
		return nil, nil
	case m.API == agentsv1alpha1.ModelAPIOpenAI:
		return []string{"--openai-api-base", m.BaseURL + "/v1", "--openai-api-key", agent.PlaceholderKey}, nil
	default:
		return []string{"--anthropic-api-key", agent.PlaceholderKey},
			[]string{"ANTHROPIC_API_BASE=" + m.BaseURL, "ANTHROPIC_BASE_URL=" + m.BaseURL}
	}
}

// NewParser implements agent.Agent.
func (Adapter) NewParser() agent.Parser { return &parser{} }

var (
	reTokens  = regexp.MustCompile(`^Tokens: ([0-9.,]+k?) sent(?:, ([0-9.,]+k?) cache write)?(?:, ([0-9.,]+k?) cache hit)?, ([0-9.,]+k?) received\.(?: Cost: \$([0-9.]+) message)?`)
	reModel   = regexp.MustCompile(`^(?:Main model|Model): (\S+)`)
	reCommit  = regexp.MustCompile(`^Commit ([0-9a-f]{7,40}) (.*)$`)
	reApplied = regexp.MustCompile(`^Applied edit to (.+)$`)
	reRetry   = regexp.MustCompile(`^Retrying in [0-9.]+ seconds`)
	// reBlankLine separates the reply's paragraphs.
	reBlankLine = regexp.MustCompile(`\n[ \t]*\n`)
	reError     = regexp.MustCompile(`^(litellm\.\w+|Error|\w+Error)\b.*`)
	// Lines aider prints about itself rather than the model's reply.
	reMeta = regexp.MustCompile(`^(Aider v|Git repo:|Repo-map:|Weak model:|Editor model:|Added .* to the chat|Use /help|Warning:|Detected dumb terminal|Analytics have been|Cost estimates may be|Only \d+ reflections|Can't initialize prompt toolkit|https://aider\.chat/)`)
)

type parser struct {
	sawBanner bool
	reply     []string
	errors    []string
	lines     int
}

func (p *parser) Line(raw []byte) []agent.Event {
	p.lines++
	s := strings.TrimRight(string(raw), " \t\r")
	// History-file quoting ("> Tokens: ...") appears when aider echoes; accept both.
	s = strings.TrimPrefix(s, "> ")
	active := agent.Event{Kind: agent.KindActivity, State: agentsv1alpha1.ActivityActive}
	switch {
	case strings.HasPrefix(s, "Aider v"):
		p.sawBanner = true
		return []agent.Event{active}
	case reModel.MatchString(s):
		return []agent.Event{{Kind: agent.KindSession, Model: reModel.FindStringSubmatch(s)[1]}}
	case reTokens.MatchString(s):
		m := reTokens.FindStringSubmatch(s)
		u := agent.Usage{InputTokens: tokens(m[1]) + tokens(m[2]), CacheReadTokens: tokens(m[3]), OutputTokens: tokens(m[4])}
		if m[5] != "" {
			u.CostUSD, _ = strconv.ParseFloat(m[5], 64)
		}
		return []agent.Event{{Kind: agent.KindUsage, Usage: &u}}
	case reApplied.MatchString(s):
		return []agent.Event{active, {Kind: agent.KindToolUse, Tool: "edit", Text: reApplied.FindStringSubmatch(s)[1]}}
	case reCommit.MatchString(s):
		m := reCommit.FindStringSubmatch(s)
		return []agent.Event{active, {Kind: agent.KindToolUse, Tool: "commit", Text: m[1] + " " + m[2]}}
	case reRetry.MatchString(s):
		return []agent.Event{{Kind: agent.KindError, Retrying: true, Text: s}}
	case reError.MatchString(s):
		p.errors = append(p.errors, s)
		return []agent.Event{{Kind: agent.KindError, Text: s}}
	case reMeta.MatchString(s):
		return nil
	}
	if !p.sawBanner {
		return nil
	}
	p.reply = append(p.reply, s)
	return nil
}

// Finish reports the turn result: the reply's last paragraph is the summary. Aider prints no
// end-of-turn marker, so a turn with no banner at all is reported as unreadable output.
func (p *parser) Finish() []agent.Event {
	if !p.sawBanner {
		return []agent.Event{{Kind: agent.KindError, Malformed: true,
			Text: fmt.Sprintf("aider: output ended after %d lines without aider's banner", p.lines)}}
	}
	reply := strings.TrimSpace(strings.Join(p.reply, "\n"))
	if reply == "" && len(p.errors) > 0 {
		return []agent.Event{{Kind: agent.KindTurnResult, IsError: true, Text: strings.Join(p.errors, "\n")}}
	}
	var events []agent.Event
	if q := agent.QuestionFromText(reply); q != "" {
		events = append(events, agent.Event{Kind: agent.KindQuestion, Text: q})
	}
	return append(events, agent.Event{Kind: agent.KindTurnResult, Text: clip.To(lastParagraph(reply), 4096)})
}

// lastParagraph is the reply's last paragraph of prose: aider's reply narrates, shows each edit
// as a file name over a fenced SEARCH/REPLACE block, and usually ends with what it did, which is
// the pull request's summary. The edit blocks are left out (a diff is no summary).
func lastParagraph(reply string) string {
	var prose []string
	lines := strings.Split(reply, "\n")
	for i := 0; i < len(lines); i++ {
		if strings.HasPrefix(strings.TrimSpace(lines[i]), "```") {
			// A fence: skip to its end, and drop the file name line aider prints above it.
			if n := len(prose); n > 0 && strings.TrimSpace(prose[n-1]) != "" && !strings.Contains(prose[n-1], " ") {
				prose = prose[:n-1]
			}
			for i++; i < len(lines) && !strings.HasPrefix(strings.TrimSpace(lines[i]), "```"); i++ {
			}
			continue
		}
		prose = append(prose, lines[i])
	}
	paras := reBlankLine.Split(strings.TrimSpace(strings.Join(prose, "\n")), -1)
	for i := len(paras) - 1; i >= 0; i-- {
		if p := strings.TrimSpace(paras[i]); p != "" {
			return p
		}
	}
	return ""
}

// tokens reads aider's token counts: "42", "1,234", "3.0k".
func tokens(s string) int64 {
	if s == "" {
		return 0
	}
	s = strings.ReplaceAll(s, ",", "")
	mult := 1.0
	if strings.HasSuffix(s, "k") {
		mult, s = 1000, strings.TrimSuffix(s, "k")
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0
	}
	return int64(f * mult)
}
