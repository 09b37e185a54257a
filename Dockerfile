# syntax=docker/dockerfile:1
# The production recipe for Shepherd's images. `make docker-build` builds the first two targets:
#   docker build --target manager -t shepherd-manager .
#   docker build --target runner  -t shepherd-runner .
# and the agent images (the real CLIs pinned in hack/agent-clis.versions, docs/agents.md):
#   docker build --target agent-claude-code -t shepherd-agent-claude-code .
#   docker build --target agent-codex       -t shepherd-agent-codex .
#   docker build --target agent-opencode    -t shepherd-agent-opencode .
#   docker build --target agent-gemini      -t shepherd-agent-gemini .
# The local builder (make images-local, for machines without a Docker engine) produces
# equivalent images; a test checks that both agree on entrypoint, user, environment and paths.

FROM golang:1.26 AS builder
ARG TARGETOS
ARG TARGETARCH
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY api/ api/
COPY cmd/ cmd/
COPY internal/ internal/
ENV CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH}
RUN go build -trimpath -ldflags="-s -w" -o /out/manager ./cmd/manager \
 && go build -trimpath -ldflags="-s -w" -o /out/runner ./cmd/runner

# The runner image: the in-pod helper plus git for the checkout init container. Its binary is
# copied into any agent image at start (runner copy-self), so agent images need no changes.
FROM debian:bookworm-slim AS runner
RUN apt-get update \
 && apt-get install -y --no-install-recommends git ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=builder /out/runner /usr/local/bin/shepherd-runner
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/shepherd-runner"]

# The agent CLIs, each installed with npm at the version pinned in hack/agent-clis.versions
# (`<package> <version> <binary>`) in a Node.js image, then copied without Node.js: Claude Code,
# Codex and OpenCode are native executables. Gemini CLI is JavaScript: its image gets node too.
# One stage per CLI, so a target installs only its own.
FROM node:22-bookworm-slim AS claude-code-install
COPY hack/agent-clis.versions /tmp/agent-clis.versions
RUN pkg=$(awk '$3 == "claude" { print $1 "@" $2 }' /tmp/agent-clis.versions) \
 && npm install -g --no-audit --no-fund --include=optional "$pkg" \
 && mkdir -p /out \
 && cp -L "$(npm root -g)/@anthropic-ai/claude-code/bin/claude.exe" /out/claude \
 && /out/claude --version

FROM node:22-bookworm-slim AS codex-install
COPY hack/agent-clis.versions /tmp/agent-clis.versions
RUN pkg=$(awk '$3 == "codex" { print $1 "@" $2 }' /tmp/agent-clis.versions) \
 && npm install -g --no-audit --no-fund --include=optional "$pkg" \
 && exe=$(find "$(npm root -g)/@openai" -path '*/vendor/*/bin/codex' -type f | head -n 1) \
 && mkdir -p /out \
 && cp -a "$(dirname "$(dirname "$exe")")" /out/codex \
 && /out/codex/bin/codex --version

FROM node:22-bookworm-slim AS opencode-install
COPY hack/agent-clis.versions /tmp/agent-clis.versions
RUN pkg=$(awk '$3 == "opencode" { print $1 "@" $2 }' /tmp/agent-clis.versions) \
 && npm install -g --no-audit --no-fund --include=optional "$pkg" \
 && mkdir -p /out/opencode-config \
 && cp -L "$(npm root -g)/opencode-ai/bin/opencode.exe" /out/opencode \
 && npm install --prefix /out/opencode-config --save-exact --no-audit --no-fund "@opencode-ai/plugin@${pkg##*@}" \
 && printf 'node_modules\npackage.json\nbun.lock\n.gitignore' > /out/opencode-config/.gitignore \
 && /out/opencode --version

# Gemini CLI's package as hack/agent-clis.sh installs it (npm install --prefix: the package and
# its dependencies under node_modules), with the node that runs it.
FROM node:22-bookworm-slim AS gemini-install
COPY hack/agent-clis.versions /tmp/agent-clis.versions
RUN pkg=$(awk '$3 == "gemini" { print $1 "@" $2 }' /tmp/agent-clis.versions) \
 && npm install --prefix /out/gemini --no-save --no-audit --no-fund --include=optional "$pkg" \
 && cp /usr/local/bin/node /out/node \
 && /out/node /out/gemini/node_modules/@google/gemini-cli/bundle/gemini.js --version

# What every agent image shares: git and bash, a user 65532 ("agent") with a writable home.
# The runner binary is copied in at start (runner copy-self), as for any agent image.
FROM debian:bookworm-slim AS agent-base
RUN apt-get update \
 && apt-get install -y --no-install-recommends git ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 65532 agent \
 && useradd --uid 65532 --gid 65532 --home-dir /home/agent --create-home --shell /bin/bash --comment "Shepherd agent" agent
ENV HOME=/home/agent
WORKDIR /home/agent

# Claude Code, offline but for the model API (ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY come from
# the Project's agent.env). Non-root, so bypassPermissions works without IS_SANDBOX.
FROM agent-base AS agent-claude-code
COPY --from=claude-code-install /out/claude /usr/local/bin/claude
ENV CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_AUTOUPDATER=1 DISABLE_TELEMETRY=1 DISABLE_ERROR_REPORTING=1
USER 65532:65532
CMD ["claude", "--version"]

# Codex: the static binary with codex-code-mode-host, codex-path/rg and codex-resources next to
# it; CODEX_HOME holds the offline config.toml (the model provider comes from agent.extraArgs).
FROM agent-base AS agent-codex
COPY --from=codex-install /out/codex /opt/codex
RUN ln -s /opt/codex/bin/codex /usr/local/bin/codex \
 && install -d -o 65532 -g 65532 -m 0755 /home/agent/.codex
COPY --chown=65532:65532 hack/agent-images/codex/config.toml /home/agent/.codex/config.toml
ENV CODEX_HOME=/home/agent/.codex
USER 65532:65532
CMD ["codex", "--version"]

# OpenCode: its config directory holds @opencode-ai/plugin (else OpenCode npm-installs it at
# every start) and the offline global config; the provider comes from OPENCODE_CONFIG(_CONTENT).
FROM agent-base AS agent-opencode
COPY --from=opencode-install /out/opencode /usr/local/bin/opencode
# The config directory is root's: OpenCode writes to one the agent owns at every start (a
# .gitignore), which fails on the pod's read-only root file system; one it cannot write it leaves.
RUN install -d -m 0755 /home/agent/.config
COPY --from=opencode-install /out/opencode-config /home/agent/.config/opencode
COPY hack/agent-images/opencode/opencode.json /home/agent/.config/opencode/opencode.json
ENV XDG_CONFIG_HOME=/home/agent/.config OPENCODE_DISABLE_MODELS_FETCH=1 OPENCODE_DISABLE_AUTOUPDATE=1 OPENCODE_DISABLE_LSP_DOWNLOAD=1 OPENCODE_DISABLE_SHARE=1 OPENCODE_DISABLE_DEFAULT_PLUGINS=1
USER 65532:65532
CMD ["opencode", "--version"]

# Gemini CLI: its bundle (node_modules/@google/gemini-cli/bundle/gemini.js, #!/usr/bin/env node)
# and node. The system settings file (over every user and project settings file) selects the API
# key as the way in, which a base URL (the Project's model API) needs headless, and keeps usage
# statistics, telemetry and updates off; the key and base URL come from the adapter.
FROM agent-base AS agent-gemini
COPY --from=gemini-install /out/node /usr/local/bin/node
COPY --from=gemini-install /out/gemini/node_modules /opt/gemini/node_modules
RUN ln -s /opt/gemini/node_modules/@google/gemini-cli/bundle/gemini.js /usr/local/bin/gemini \
 && install -d -m 0755 /etc/gemini-cli
COPY hack/agent-images/gemini/settings.json /etc/gemini-cli/settings.json
USER 65532:65532
CMD ["gemini", "--version"]

# Aider ships only through PyPI (aider-chat, pinned in hack/agent-images/aider/requirements.txt):
# the one agent image the repository's local builder cannot make, on machines that reach no PyPI.
# `docker build --target agent-aider -t shepherd-agent-aider:<tag> .` makes the manager's default
# aider image wherever PyPI is reachable. Python's own slim image, with what agent-base adds: git,
# the user 65532, a writable home; analytics and the update check off.
FROM python:3.12-slim-bookworm AS agent-aider
RUN apt-get update \
 && apt-get install -y --no-install-recommends git ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 65532 agent \
 && useradd --uid 65532 --gid 65532 --home-dir /home/agent --create-home --shell /bin/bash --comment "Shepherd agent" agent
COPY hack/agent-images/aider/requirements.txt /tmp/aider-requirements.txt
RUN pip install --no-cache-dir -r /tmp/aider-requirements.txt && rm /tmp/aider-requirements.txt
ENV HOME=/home/agent AIDER_ANALYTICS=false AIDER_CHECK_UPDATE=false AIDER_SHOW_RELEASE_NOTES=false
WORKDIR /home/agent
USER 65532:65532
CMD ["aider", "--version"]

# The manager image: a static binary on distroless, non-root. Last, so a plain `docker build .`
# builds it.
FROM gcr.io/distroless/static:nonroot AS manager
WORKDIR /
COPY --from=builder /out/manager /manager
USER 65532:65532
ENTRYPOINT ["/manager"]
