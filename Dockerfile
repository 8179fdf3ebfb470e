# mirrord: a static binary on distroless, run as a non-root user.
#
#   docker build --build-arg VERSION=v0.1.0 -t mirrord .
#   docker run --rm -v $PWD/config.hcl:/etc/mirrord/config.hcl:ro -p 9644:9644 mirrord
#
# In a container, set agent.listen = "0.0.0.0:9644" (or ":9644") in the
# configuration: the default, 127.0.0.1:9644, is unreachable from outside
# the container. Such a listener needs an admin token (agent.admin.token_file
# on a mounted secret, or token_env), or mirrord run refuses to start.

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION} AS build
WORKDIR /src
# Modules first, so that a source change does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
# CGO_ENABLED=0: a static binary that needs no libc; -trimpath: no build
# paths in it; -s -w: no symbol table or DWARF.
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/mirrord ./cmd/mirrord \
 && /out/mirrord version

# distroless/static: CA certificates, tzdata, /etc/passwd with the nonroot
# user (uid 65532); no shell, no package manager.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/mirrord /usr/local/bin/mirrord
USER 65532:65532
EXPOSE 9644
ENTRYPOINT ["mirrord"]
CMD ["run", "--config", "/etc/mirrord/config.hcl"]
