# syntax=docker/dockerfile:1
# The production recipe for Shepherd's images. `make docker-build` builds both targets:
#   docker build --target manager -t shepherd-manager .
#   docker build --target runner  -t shepherd-runner .
# The local builder (make images-local, for machines without a Docker engine) produces
# equivalent images; a test checks that both agree on entrypoint, user and paths.

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

# The manager image: a static binary on distroless, non-root. Last, so a plain `docker build .`
# builds it.
FROM gcr.io/distroless/static:nonroot AS manager
WORKDIR /
COPY --from=builder /out/manager /manager
USER 65532:65532
ENTRYPOINT ["/manager"]
