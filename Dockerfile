# The Prism image: one `prism` binary for every component (scheduler extender and webhook, node
# agent, MIG manager) and libprism-vgpu.so, which the node agent's init container copies to the
# host. What it contains and why, and how to build, push and deploy it: docs/image.md.
#
#   docker build -t ghcr.io/prism-gpu/prism:0.1.0 \
#     --build-arg PRISM_BUILD_COMMIT=$(git rev-parse --short=12 HEAD) .
#
# tools/image/build.sh builds the same image from Debian packages alone (no Docker engine, no
# image registry); both read tools/image/runtime-packages.txt and run tools/image/stage.sh and
# tools/image/finish-rootfs.sh, and tools/image/definition_test.sh checks that the rest agrees.

# ---- Build: the project's own setup script and release preset on Debian 12 --------------------
FROM debian:12 AS build
COPY tools/setup.sh /src/tools/setup.sh
RUN /src/tools/setup.sh && rm -rf /var/lib/apt/lists/*
COPY . /src
WORKDIR /src
# The commit `prism version` names (CMake's PRISM_BUILD_COMMIT; empty: the version alone).
ARG PRISM_BUILD_COMMIT=""
RUN cmake --preset release -DPRISM_BUILD_BENCHMARKS=OFF -DPRISM_BUILD_COMMIT="${PRISM_BUILD_COMMIT}" \
 && cmake --build --preset release --target prism prism_vgpu \
 && tools/image/packages.sh --check build/release \
 && tools/image/stage.sh build/release /payload

# ---- Runtime: Debian 12 slim with the runtime libraries only -------------------------------------
FROM debian:12-slim
COPY tools/image/finish-rootfs.sh tools/image/runtime-packages.txt /tmp/prism-image/
RUN sh /tmp/prism-image/finish-rootfs.sh --apt && rm -rf /tmp/prism-image
COPY --from=build /payload/ /
ARG PRISM_VERSION=0.1.0
ARG PRISM_BUILD_COMMIT=""
LABEL org.opencontainers.image.title=prism \
      org.opencontainers.image.version="${PRISM_VERSION}" \
      org.opencontainers.image.revision="${PRISM_BUILD_COMMIT}" \
      org.opencontainers.image.base.name=debian:12-slim
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
WORKDIR /
# Root by default: the node agent and the MIG manager are privileged and write host paths (device
# plugin sockets, CDI specs, the library copy). The scheduler's pods run as 65532 (nonroot, made by
# finish-rootfs.sh) through their securityContext.
ENTRYPOINT ["/usr/local/bin/prism"]
CMD ["--help"]
