package main

import (
	"bufio"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// The agent images: each real agent CLI pinned in hack/agent-clis.versions, taken from the cache
// hack/agent-clis.sh fills (~/.cache/shepherd/agent-clis), on the Debian base with git and bash,
// with a user 65532 ("agent") whose home is writable, and the settings that keep the CLI
// offline. No Node.js for Claude Code, Codex and OpenCode, native executables; Gemini CLI is
// JavaScript and gets the node that installed it (docs/agents.md, "The agent images"). The
// Dockerfile's agent-* stages are the production recipe of the same images (npm install in a
// node image, then copied to a slim base); images_test.go checks that both agree. Files both
// recipes copy live in hack/agent-images.

const (
	agentUser = "agent"
	agentUID  = 65532
	agentHome = "/home/agent"
	// agentImagesDir holds the files the local builder and the Dockerfile both put into the
	// agent images (Codex's config.toml, OpenCode's global config, Gemini CLI's settings).
	agentImagesDir = "hack/agent-images"
)

// agentImageDef is one agent image.
type agentImageDef struct {
	Key    string // the name `images --only` takes
	Image  string
	Stage  string // the Dockerfile stage
	Binary string // the CLI's program, as in hack/agent-clis.versions
}

// agentImageDefs are the agent images; cmd/manager's --agent-images defaults to these names.
var agentImageDefs = []agentImageDef{
	{Key: "claude-code", Image: "shepherd-agent-claude-code:latest", Stage: "agent-claude-code", Binary: "claude"},
	{Key: "codex", Image: "shepherd-agent-codex:latest", Stage: "agent-codex", Binary: "codex"},
	{Key: "opencode", Image: "shepherd-agent-opencode:latest", Stage: "agent-opencode", Binary: "opencode"},
	{Key: "gemini", Image: "shepherd-agent-gemini:latest", Stage: "agent-gemini", Binary: "gemini"},
}

func agentDef(key string) agentImageDef {
	for _, d := range agentImageDefs {
		if d.Key == key {
			return d
		}
	}
	panic("no agent image " + key)
}

// claudeEnv keeps Claude Code from calling anything but the model API (docs/agents.md): the
// umbrella switch and the three it covers, in case one is dropped from it.
var claudeEnv = []string{
	"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
	"DISABLE_AUTOUPDATER=1",
	"DISABLE_TELEMETRY=1",
	"DISABLE_ERROR_REPORTING=1",
}

// openCodeEnv keeps OpenCode offline: no models.dev fetch, no self-update, no LSP download, no
// sharing, no default plugins; its config directory (with @opencode-ai/plugin installed, so it
// does not npm-install it at start) stays in the image even when a pod moves HOME.
var openCodeEnv = []string{
	"XDG_CONFIG_HOME=" + agentHome + "/.config",
	"OPENCODE_DISABLE_MODELS_FETCH=1",
	"OPENCODE_DISABLE_AUTOUPDATE=1",
	"OPENCODE_DISABLE_LSP_DOWNLOAD=1",
	"OPENCODE_DISABLE_SHARE=1",
	"OPENCODE_DISABLE_DEFAULT_PLUGINS=1",
}

// codexHome is CODEX_HOME in the Codex image: its config.toml turns off the update check,
// plugins and analytics.
const codexHome = agentHome + "/.codex"

// pinnedCLI is a line of hack/agent-clis.versions.
type pinnedCLI struct{ Package, Version, Binary string }

// readPinnedCLIs reads hack/agent-clis.versions, keyed by binary.
func readPinnedCLIs(repo string) (map[string]pinnedCLI, error) {
	p := filepath.Join(repo, "hack", "agent-clis.versions")
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	out := map[string]pinnedCLI{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		f := strings.Fields(l)
		if len(f) != 3 {
			return nil, fmt.Errorf("%s: want '<package> <version> <binary>', got %q", p, l)
		}
		out[f[2]] = pinnedCLI{Package: f[0], Version: f[1], Binary: f[2]}
	}
	return out, sc.Err()
}

// agentInputs is what the agent images are made of.
type agentInputs struct {
	Repo string
	// CLIs are the pinned CLIs by binary, and CLIDir where hack/agent-clis.sh installed each
	// (<cache>/agent-clis/<package>@<version>, holding node_modules).
	CLIs   map[string]pinnedCLI
	CLIDir func(pinnedCLI) string
	// Passwd and Group are the Debian base's /etc/passwd and /etc/group, which the images
	// extend with the agent user.
	Passwd, Group string
	// OpenCodePlugin is a directory where @opencode-ai/plugin was npm-installed (package.json,
	// package-lock.json, node_modules): OpenCode's config directory in the image.
	OpenCodePlugin string
	// Node is the node executable that runs Gemini CLI in its image: the one that installed it
	// (hack/agent-clis.sh needs node), as the Dockerfile copies its install stage's.
	Node string
}

// agentBaseSpec is what every agent image shares: the Debian base, the agent user 65532 with its
// home, git and bash from the base, the Dockerfile stage's user, workdir and command.
func agentBaseSpec(def agentImageDef, in agentInputs) imageSpec {
	passwd := ensureNewline(in.Passwd) + fmt.Sprintf("%s:x:%d:%d:Shepherd agent:%s:/bin/bash\n", agentUser, agentUID, agentUID, agentHome)
	group := ensureNewline(in.Group) + fmt.Sprintf("%s:x:%d:\n", agentUser, agentUID)
	return imageSpec{
		Name:       def.Image,
		Stage:      def.Stage,
		DebianBase: true,
		User:       nonRootUser,
		WorkingDir: agentHome,
		Env:        []string{debianPath, "HOME=" + agentHome},
		Cmd:        []string{def.Binary, "--version"},
		Files: []imageFile{
			{Path: "/etc/passwd", Mode: 0o644, Data: []byte(passwd)},
			{Path: "/etc/group", Mode: 0o644, Data: []byte(group)},
			{Path: agentHome, Dir: true, Mode: 0o755, UID: agentUID, GID: agentUID},
		},
	}
}

func ensureNewline(s string) string {
	if s != "" && !strings.HasSuffix(s, "\n") {
		return s + "\n"
	}
	return s
}

// claudeCodeSpec: Claude Code's native (glibc) executable as /usr/local/bin/claude.
func claudeCodeSpec(in agentInputs) (imageSpec, error) {
	cli, ok := in.CLIs["claude"]
	if !ok {
		return imageSpec{}, fmt.Errorf("hack/agent-clis.versions pins no claude")
	}
	s := agentBaseSpec(agentDef("claude-code"), in)
	// The package's bin/claude.exe is its platform binary, linked there by its postinstall.
	src := filepath.Join(in.CLIDir(cli), "node_modules", filepath.FromSlash(cli.Package), "bin", "claude.exe")
	s.Big = []imageFile{{Path: "/usr/local/bin/claude", Mode: 0o755, Src: src}}
	s.Env = append(s.Env, claudeEnv...)
	return s, nil
}

// codexSpec: the static Codex executable with what it finds next to it (codex-code-mode-host,
// codex-path/rg, codex-resources) as /opt/codex, /usr/local/bin/codex linking to it, and
// CODEX_HOME with the offline config.toml.
func codexSpec(in agentInputs) (imageSpec, error) {
	cli, ok := in.CLIs["codex"]
	if !ok {
		return imageSpec{}, fmt.Errorf("hack/agent-clis.versions pins no codex")
	}
	s := agentBaseSpec(agentDef("codex"), in)
	// node_modules/@openai/codex-linux-<arch>/vendor/<target triple>/bin/codex: the platform
	// package npm installed for this machine.
	matches, _ := filepath.Glob(filepath.Join(in.CLIDir(cli), "node_modules", "@openai", "codex-linux-*", "vendor", "*", "bin", "codex"))
	if len(matches) != 1 {
		return imageSpec{}, fmt.Errorf("want one native codex under %s, found %v", in.CLIDir(cli), matches)
	}
	vendor := filepath.Dir(filepath.Dir(matches[0]))
	tree, err := treeFiles(vendor, "/opt/codex", 0)
	if err != nil {
		return imageSpec{}, err
	}
	s.Big = tree
	s.Files = append(s.Files,
		imageFile{Path: "/usr/local/bin/codex", Link: "/opt/codex/bin/codex"},
		imageFile{Path: codexHome, Dir: true, Mode: 0o755, UID: agentUID, GID: agentUID},
		imageFile{Path: codexHome + "/config.toml", Mode: 0o644, UID: agentUID, GID: agentUID,
			Src: filepath.Join(in.Repo, agentImagesDir, "codex", "config.toml")},
	)
	s.Env = append(s.Env, "CODEX_HOME="+codexHome)
	return s, nil
}

// openCodeGitignore is what OpenCode writes into its config directory when the file is missing.
const openCodeGitignore = "node_modules\npackage.json\nbun.lock\n.gitignore"

// openCodeSpec: OpenCode's native executable as /usr/local/bin/opencode, its config directory
// ($XDG_CONFIG_HOME/opencode) with @opencode-ai/plugin installed and the offline global config.
func openCodeSpec(in agentInputs) (imageSpec, error) {
	cli, ok := in.CLIs["opencode"]
	if !ok {
		return imageSpec{}, fmt.Errorf("hack/agent-clis.versions pins no opencode")
	}
	if in.OpenCodePlugin == "" {
		return imageSpec{}, fmt.Errorf("no @opencode-ai/plugin install for the OpenCode image")
	}
	s := agentBaseSpec(agentDef("opencode"), in)
	configDir := agentHome + "/.config/opencode"
	// The config directory is root's, so that the agent (uid 65532) cannot write it: OpenCode
	// then leaves it alone. Owned by the agent but on the pod's read-only root file system,
	// OpenCode tries to write a .gitignore there at every start and fails ("Unexpected error").
	plugin, err := treeFiles(in.OpenCodePlugin, configDir, 0)
	if err != nil {
		return imageSpec{}, err
	}
	s.Big = append([]imageFile{
		{Path: agentHome, Dir: true, Mode: 0o755, UID: agentUID, GID: agentUID},
		{Path: agentHome + "/.config", Dir: true, Mode: 0o755},
		{Path: "/usr/local/bin/opencode", Mode: 0o755, Src: filepath.Join(in.CLIDir(cli), "node_modules", filepath.FromSlash(cli.Package), "bin", "opencode.exe")},
	}, plugin...)
	s.Files = append(s.Files,
		imageFile{Path: agentHome + "/.config", Dir: true, Mode: 0o755},
		imageFile{Path: configDir, Dir: true, Mode: 0o755},
		imageFile{Path: configDir + "/opencode.json", Mode: 0o644,
			Src: filepath.Join(in.Repo, agentImagesDir, "opencode", "opencode.json")},
		// OpenCode writes this file at every start unless it exists; the root file system of
		// an agent pod is read-only.
		imageFile{Path: configDir + "/.gitignore", Mode: 0o644, Data: []byte(openCodeGitignore)},
	)
	s.Env = append(s.Env, openCodeEnv...)
	return s, nil
}

// geminiSettings is Gemini CLI's system settings file in its image: over every user and project
// settings file.
const geminiSettings = "/etc/gemini-cli/settings.json"

// geminiSpec: Gemini CLI's npm install (its bundle and dependencies under node_modules) as
// /opt/gemini, /usr/local/bin/gemini linking to its bundle's gemini.js (#!/usr/bin/env node),
// node as /usr/local/bin/node, and the system settings that select the API key and keep usage
// statistics, telemetry and updates off.
func geminiSpec(in agentInputs) (imageSpec, error) {
	cli, ok := in.CLIs["gemini"]
	if !ok {
		return imageSpec{}, fmt.Errorf("hack/agent-clis.versions pins no gemini")
	}
	if in.Node == "" {
		return imageSpec{}, fmt.Errorf("no node executable for the Gemini CLI image")
	}
	s := agentBaseSpec(agentDef("gemini"), in)
	modules, err := treeFiles(filepath.Join(in.CLIDir(cli), "node_modules"), "/opt/gemini/node_modules", 0)
	if err != nil {
		return imageSpec{}, err
	}
	s.Big = append([]imageFile{{Path: "/usr/local/bin/node", Mode: 0o755, Src: in.Node}}, modules...)
	s.Files = append(s.Files,
		imageFile{Path: "/usr/local/bin/gemini", Link: "/opt/gemini/node_modules/" + cli.Package + "/bundle/gemini.js"},
		imageFile{Path: "/etc/gemini-cli", Dir: true, Mode: 0o755},
		imageFile{Path: geminiSettings, Mode: 0o644, Src: filepath.Join(in.Repo, agentImagesDir, "gemini", "settings.json")},
	)
	return s, nil
}

// agentSpec returns the spec of the agent image named key.
func agentSpec(key string, in agentInputs) (imageSpec, error) {
	switch key {
	case "claude-code":
		return claudeCodeSpec(in)
	case "codex":
		return codexSpec(in)
	case "opencode":
		return openCodeSpec(in)
	case "gemini":
		return geminiSpec(in)
	}
	return imageSpec{}, fmt.Errorf("no agent image %q", key)
}

// treeFiles lists the directory src as image files under dest (the directory itself included):
// modes and symlinks as they are, owned by uid (and the same gid).
func treeFiles(src, dest string, uid int) ([]imageFile, error) {
	var out []imageFile
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := dest
		if rel != "." {
			target = dest + "/" + filepath.ToSlash(rel)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		f := imageFile{Path: target, Mode: int64(info.Mode().Perm()), UID: uid, GID: uid}
		switch {
		case d.IsDir():
			f.Dir = true
		case info.Mode()&fs.ModeSymlink != 0:
			if f.Link, err = os.Readlink(p); err != nil {
				return err
			}
		case info.Mode().IsRegular():
			f.Src = p
		default:
			return nil // sockets, devices: nothing an install leaves
		}
		out = append(out, f)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", src, err)
	}
	return out, nil
}

// ensureAgentCLIs runs hack/agent-clis.sh, which installs the pinned CLIs into the cache when
// they are missing (npm, ~35 s cold) and is a no-op otherwise, and returns them.
func ensureAgentCLIs(ctx context.Context, repo, cacheDir string) (map[string]pinnedCLI, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	start := time.Now()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(repo, "hack", "agent-clis.sh"))
	cmd.Env = append(os.Environ(), "SHEPHERD_CACHE="+cacheDir)
	cmd.Stderr = os.Stderr
	if _, err := cmd.Output(); err != nil {
		return nil, fmt.Errorf("hack/agent-clis.sh (it needs node and npm): %w", err)
	}
	clis, err := readPinnedCLIs(repo)
	if err != nil {
		return nil, err
	}
	logf("agent CLIs ready in %s (hack/agent-clis.sh)", since(start))
	return clis, nil
}

func cliDir(cacheDir string) func(pinnedCLI) string {
	return func(c pinnedCLI) string {
		return filepath.Join(cacheDir, "agent-clis", c.Package+"@"+c.Version)
	}
}

// ensureOpenCodePlugin npm-installs @opencode-ai/plugin at OpenCode's version into the cache
// once, as OpenCode itself would into its config directory at start, and returns the directory.
func ensureOpenCodePlugin(ctx context.Context, cacheDir, version string) (string, error) {
	base := filepath.Join(cacheDir, "images", "opencode-plugin@"+version)
	dir := filepath.Join(base, "config")
	if _, err := os.Stat(filepath.Join(base, ".installed")); err == nil {
		return dir, nil
	}
	if err := os.RemoveAll(base); err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "install", "--prefix", dir, "--save-exact", "--no-audit", "--no-fund",
		"--no-update-notifier", "--loglevel=error", "@opencode-ai/plugin@"+version)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		_ = os.RemoveAll(base)
		return "", fmt.Errorf("npm install @opencode-ai/plugin@%s: %w", version, err)
	}
	if err := os.WriteFile(filepath.Join(base, ".installed"), nil, 0o644); err != nil {
		return "", err
	}
	logf("@opencode-ai/plugin@%s installed in %s", version, since(start))
	return dir, nil
}

// nodeExecutable is the node on PATH, the one hack/agent-clis.sh installs with, its links
// resolved: the Gemini CLI image runs the CLI with it.
func nodeExecutable() (string, error) {
	p, err := exec.LookPath("node")
	if err != nil {
		return "", fmt.Errorf("the Gemini CLI image needs node (Node.js 20 or later): %w", err)
	}
	return filepath.EvalSymlinks(p)
}
