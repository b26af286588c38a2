# syntax=docker/dockerfile:1
# Static outbox-relay binary on distroless: no shell, no package manager,
# runs as the non-root user 65532.
#   docker build --build-arg VERSION=$(git describe --tags --always) \
#     --build-arg REVISION=$(git rev-parse HEAD) \
#     --build-arg BUILD_TIME=$(git show -s --format=%cI HEAD) -t outbox-relay .
# (`outbox-relay version` prints them; .git is not copied into the build.)
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG REVISION=
ARG BUILD_TIME=
RUN CGO_ENABLED=0 go build -trimpath -buildvcs=false \
      -ldflags "-s -w -X main.version=${VERSION} -X main.revision=${REVISION} -X main.buildTime=${BUILD_TIME}" \
      -o /out/outbox-relay ./cmd/outbox-relay \
 && mkdir -p /out/state

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/outbox-relay /outbox-relay
# Checkpoints and dead letters (checkpoint.store: file); mount a volume here.
COPY --from=build --chown=65532:65532 /out/state /var/lib/outbox-relay
USER 65532:65532
WORKDIR /var/lib/outbox-relay
EXPOSE 9108
# distroless has no shell or curl: the binary checks its own /healthz.
# Needs http.listen: 0.0.0.0:9108 (or 127.0.0.1:9108) in the config.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
  CMD ["/outbox-relay", "healthcheck", "--url", "http://127.0.0.1:9108/healthz"]
ENTRYPOINT ["/outbox-relay"]
CMD ["run", "--config", "/etc/outbox-relay/config.yaml"]
