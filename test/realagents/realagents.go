// Package realagents installs the pinned agent CLIs (Claude Code, Codex, OpenCode, Gemini CLI)
// from the npm registry and sets each up to run offline against the scripted model server
// (test/modelserver). Its tests drive the real CLIs through the adapters of internal/agent; the
// runner's tests use it to drive them through the runner.
//
// The versions live in hack/agent-clis.versions; hack/agent-clis.sh installs them into
// ~/.cache/shepherd/agent-clis. docs/agents.md says how each CLI is pointed at the server and
// which settings keep it from reaching the internet.
package realagents

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

// CLI is one pinned agent CLI.
type CLI struct {
	// Package is the npm package, Version its pinned version, Binary the program it installs.
	Package, Version, Binary string
}

// APIKey is the key the CLIs send to the scripted model server; the server accepts any.
const APIKey = "sk-shepherd-scripted-model-server"

// InstallTimeout bounds hack/agent-clis.sh: four npm installs of ~100 MB each on a cold cache.
const InstallTimeout = 15 * time.Minute

// RepoRoot is the repository's root: the nearest directory above the working directory that
// holds hack/agent-clis.versions.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "hack", "agent-clis.versions")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("hack/agent-clis.versions not found above the working directory")
		}
		dir = parent
	}
}

// Pinned reads hack/agent-clis.versions, keyed by binary name.
func Pinned() (map[string]CLI, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	f, err := os.Open(filepath.Join(root, "hack", "agent-clis.versions"))
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	out := map[string]CLI{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 3 {
			return nil, fmt.Errorf("hack/agent-clis.versions: want '<package> <version> <binary>', got %q", line)
		}
		out[fields[2]] = CLI{Package: fields[0], Version: fields[1], Binary: fields[2]}
	}
	return out, sc.Err()
}

// Binary is the program name of each agent type that has a real CLI here (Aider has none:
// PyPI is unreachable, so its fake stays).
var Binary = map[agentsv1alpha1.AgentType]string{
	agentsv1alpha1.AgentClaudeCode: "claude",
	agentsv1alpha1.AgentCodex:      "codex",
	agentsv1alpha1.AgentOpenCode:   "opencode",
	agentsv1alpha1.AgentGemini:     "gemini",
}

var (
	installOnce sync.Once
	installDir  string
	installErr  error
)

// Install runs hack/agent-clis.sh once per process (it reuses its cache, so a warm run takes
// milliseconds), checks that each binary reports its pinned version, and returns the directory
// holding claude, codex, opencode and gemini.
func Install() (string, error) {
	installOnce.Do(func() { installDir, installErr = install() })
	return installDir, installErr
}

func install() (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), InstallTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "hack", "agent-clis.sh"))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("hack/agent-clis.sh: %w\n%s", err, stderr.String())
	}
	bin := strings.TrimSpace(string(out))
	pinned, err := Pinned()
	if err != nil {
		return "", err
	}
	for name, cli := range pinned {
		if err := checkVersion(filepath.Join(bin, name), cli.Version); err != nil {
			return "", fmt.Errorf("%s@%s: %w", cli.Package, cli.Version, err)
		}
	}
	return bin, nil
}

// checkVersion runs `<binary> --version` and looks for version in what it prints.
func checkVersion(path, version string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "--version")
	cmd.Env = append(os.Environ(), "HOME="+os.TempDir(), "CODEX_HOME="+os.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s --version: %w: %s", path, err, out)
	}
	if !strings.Contains(string(out), version) {
		return fmt.Errorf("%s --version printed %q, not the pinned %s", path, strings.TrimSpace(string(out)), version)
	}
	return nil
}

// ProxyEnv routes every HTTP(S) connection a CLI (or a program it runs, such as git) makes to
// a host other than loopback through the scripted model server at baseURL, which records it as
// a problem and refuses it: the tests see any attempt to reach the internet.
func ProxyEnv(baseURL string) []string {
	const direct = "127.0.0.1,localhost,::1"
	return []string{"HTTP_PROXY=" + baseURL, "HTTPS_PROXY=" + baseURL, "http_proxy=" + baseURL, "https_proxy=" + baseURL,
		"NO_PROXY=" + direct, "no_proxy=" + direct}
}

// Setup is what one CLI needs to run against the scripted model server.
type Setup struct {
	// Env is added to the CLI's environment (HOME included): the model API, the key, and the
	// settings that keep the CLI offline.
	Env []string
}

// ForAgent sets up the CLI of typ in home (its private HOME, where it keeps its conversations:
// resuming needs the same home) to use the model server at baseURL (http://host:port, no /v1).
// With baseURL "" it sets up only what keeps the CLI offline, with no model API and no key: the
// runner's model proxy gives the CLI those (agent.Turn.ModelAPI), as in a pod.
func ForAgent(typ agentsv1alpha1.AgentType, home, baseURL string) (Setup, error) {
	if err := os.MkdirAll(home, 0o755); err != nil {
		return Setup{}, err
	}
	var setup Setup
	var err error
	switch typ {
	case agentsv1alpha1.AgentClaudeCode:
		setup = Claude(home, baseURL)
	case agentsv1alpha1.AgentCodex:
		setup, err = Codex(home, baseURL)
	case agentsv1alpha1.AgentOpenCode:
		setup, err = OpenCode(home, baseURL)
	case agentsv1alpha1.AgentGemini:
		setup, err = Gemini(home, baseURL)
	default:
		return Setup{}, fmt.Errorf("no real CLI for agent type %q", typ)
	}
	if err != nil {
		return Setup{}, err
	}
	// The CLIs' scratch files (Claude Code's /tmp/claude-<uid>, ...) stay under home too.
	tmp := filepath.Join(home, "tmp")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return Setup{}, err
	}
	setup.Env = append(setup.Env, "TMPDIR="+tmp)
	return setup, nil
}

// Claude points Claude Code at baseURL. ANTHROPIC_BASE_URL is the documented override of the
// API host; CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC turns off telemetry, error reporting, the
// auto-updater and the other calls that are not the model API (the three explicit switches say
// the same, in case one is dropped from the umbrella).
func Claude(home, baseURL string) Setup {
	env := []string{
		"HOME=" + home,
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"DISABLE_AUTOUPDATER=1",
		"DISABLE_TELEMETRY=1",
		"DISABLE_ERROR_REPORTING=1",
	}
	// Claude Code refuses --permission-mode bypassPermissions as root ("cannot be used with
	// root/sudo privileges") unless it is told it runs in a sandbox. Our agent pods run as a
	// non-root user and never need this; the tests here run as root on a throwaway VM.
	if os.Geteuid() == 0 {
		env = append(env, "IS_SANDBOX=1")
	}
	if baseURL != "" {
		env = append(env, "ANTHROPIC_BASE_URL="+baseURL, "ANTHROPIC_API_KEY="+APIKey)
	}
	return Setup{Env: env}
}

// Codex points Codex at baseURL with a model provider in $CODEX_HOME/config.toml: OPENAI_BASE_URL
// alone is ignored by this version. The provider speaks the Responses API. Plugins (a git
// ls-remote of github.com/openai/plugins and api.github.com calls at start) and analytics are
// turned off so nothing leaves the machine.
func Codex(home, baseURL string) (Setup, error) {
	codexHome := filepath.Join(home, ".codex")
	if err := os.MkdirAll(codexHome, 0o755); err != nil {
		return Setup{}, err
	}
	// Top-level keys come before the first table: after it, they would belong to that table.
	top, provider := "", ""
	env := []string{"HOME=" + home, "CODEX_HOME=" + codexHome}
	if baseURL != "" {
		top = "model_provider = \"shepherd\"\n"
		provider = fmt.Sprintf(`
[model_providers.shepherd]
name = "Scripted model server"
base_url = %q
wire_api = "responses"
env_key = "OPENAI_API_KEY"
request_max_retries = 4
stream_max_retries = 5
`, baseURL+"/v1")
		env = append(env, "OPENAI_API_KEY="+APIKey)
	}
	config := "# Written by test/realagents: Codex against the scripted model server, offline.\n" + top +
		`check_for_update_on_startup = false

[features]
plugins = false
remote_plugin = false

[analytics]
enabled = false
` + provider
	if err := os.WriteFile(filepath.Join(codexHome, "config.toml"), []byte(config), 0o644); err != nil {
		return Setup{}, err
	}
	return Setup{Env: env}, nil
}

// Gemini points Gemini CLI at baseURL: GOOGLE_GEMINI_BASE_URL, and the key in GEMINI_API_KEY
// (sent as x-goog-api-key). Its user settings ($HOME/.gemini/settings.json) are the agent
// image's system settings, hack/agent-images/gemini/settings.json: they select the API key as
// the way in (without it, this version takes a base URL for a gateway login, which headless mode
// refuses: "Invalid auth method selected.", exit 41) and turn off usage statistics (else it
// connects to play.googleapis.com), telemetry and the auto-update.
func Gemini(home, baseURL string) (Setup, error) {
	root, err := RepoRoot()
	if err != nil {
		return Setup{}, err
	}
	settings, err := os.ReadFile(filepath.Join(root, "hack", "agent-images", "gemini", "settings.json"))
	if err != nil {
		return Setup{}, err
	}
	dir := filepath.Join(home, ".gemini")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Setup{}, err
	}
	if err := os.WriteFile(filepath.Join(dir, "settings.json"), settings, 0o644); err != nil {
		return Setup{}, err
	}
	env := []string{"HOME=" + home}
	if baseURL != "" {
		env = append(env, "GOOGLE_GEMINI_BASE_URL="+baseURL, "GEMINI_API_KEY="+APIKey)
	}
	return Setup{Env: env}, nil
}

// OpenCodeProvider is the provider id of the scripted model server in OpenCode's configuration;
// models are named OpenCodeProvider + "/" + model.
const OpenCodeProvider = "shepherd"

// OpenCode points OpenCode at baseURL with a provider in a config file named by OPENCODE_CONFIG
// (it merges with OPENCODE_CONFIG_CONTENT, which the adapter uses for permissions). The provider
// uses @ai-sdk/anthropic, one of the SDKs bundled in the binary, so nothing is fetched at run
// time, and speaks the Messages API. The models are declared with their prices, so OpenCode
// reports a cost.
//
// OpenCode also installs @opencode-ai/plugin into its config directory from the npm registry,
// in the background, at every start, unless that directory already lists it as installed;
// the seed below says so (no plugin is used here). An agent image does the real install at
// build time instead.
func OpenCode(home, baseURL string) (Setup, error) {
	pinned, err := Pinned()
	if err != nil {
		return Setup{}, err
	}
	version := pinned["opencode"].Version
	configDir := filepath.Join(home, ".config", "opencode")
	if err := os.MkdirAll(filepath.Join(configDir, "node_modules"), 0o755); err != nil {
		return Setup{}, err
	}
	dep := map[string]string{"@opencode-ai/plugin": version}
	seeds := map[string]any{
		"package.json":      map[string]any{"dependencies": dep},
		"package-lock.json": map[string]any{"lockfileVersion": 3, "packages": map[string]any{"": map[string]any{"dependencies": dep}}},
	}
	for name, v := range seeds {
		if err := writeJSON(filepath.Join(configDir, name), v); err != nil {
			return Setup{}, err
		}
	}
	config := OpenCodeConfig(baseURL, APIKey, "claude-sonnet-4-5")
	file := filepath.Join(home, "opencode.json")
	if err := writeJSON(file, config); err != nil {
		return Setup{}, err
	}
	return Setup{Env: []string{
		"HOME=" + home,
		// OpenCode follows the XDG directories; pin them under home so a caller's own settings
		// neither leak in nor get written to.
		"XDG_CONFIG_HOME=" + filepath.Join(home, ".config"),
		"XDG_DATA_HOME=" + filepath.Join(home, ".local", "share"),
		"XDG_STATE_HOME=" + filepath.Join(home, ".local", "state"),
		"XDG_CACHE_HOME=" + filepath.Join(home, ".cache"),
		"OPENCODE_CONFIG=" + file,
		"OPENCODE_DISABLE_MODELS_FETCH=1",
		"OPENCODE_DISABLE_AUTOUPDATE=1",
		"OPENCODE_DISABLE_LSP_DOWNLOAD=1",
		"OPENCODE_DISABLE_SHARE=1",
		"OPENCODE_DISABLE_DEFAULT_PLUGINS=1",
	}}, nil
}

// OpenCodeConfig is an OpenCode configuration (opencode.json, or OPENCODE_CONFIG_CONTENT) whose
// only provider, OpenCodeProvider, is the scripted model server at baseURL on OpenCode's
// Anthropic provider, with two models (claude-sonnet-4-5 and claude-haiku-4-5, priced so that
// OpenCode prints a cost) and defaultModel as the default. With baseURL "" the provider has no
// options (the adapter's configuration for the runner's model proxy adds them: OpenCode merges
// the two) and only the models' prices remain.
func OpenCodeConfig(baseURL, apiKey, defaultModel string) map[string]any {
	model := func(name string, in, out float64) map[string]any {
		return map[string]any{"name": name, "tool_call": true, "attachment": false, "reasoning": false, "temperature": true,
			"limit": map[string]any{"context": 200000, "output": 64000},
			"cost":  map[string]any{"input": in, "output": out, "cache_read": in / 10, "cache_write": in * 1.25}}
	}
	provider := map[string]any{
		"npm":  "@ai-sdk/anthropic",
		"name": "Scripted model server",
		"models": map[string]any{
			"claude-sonnet-4-5": model("Sonnet (scripted)", 3, 15),
			"claude-haiku-4-5":  model("Haiku (scripted)", 1, 5),
		},
	}
	if baseURL != "" {
		provider["options"] = map[string]any{"baseURL": baseURL + "/v1", "apiKey": apiKey}
	}
	return map[string]any{
		"$schema":           "https://opencode.ai/config.json",
		"autoupdate":        false,
		"share":             "disabled",
		"model":             OpenCodeProvider + "/" + defaultModel,
		"small_model":       OpenCodeProvider + "/claude-haiku-4-5",
		"enabled_providers": []string{OpenCodeProvider},
		"provider":          map[string]any{OpenCodeProvider: provider},
	}
}

func writeJSON(path string, v any) error {
	raw, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(raw, '\n'), 0o644)
}
