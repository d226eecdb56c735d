# adapterd in a container.
#
#   podman build --format docker -t adapterd .                          # the server; mount a registry at /registry
#   podman build --format docker --target example -t adapterd:example . # with the example registry baked in
#   podman build --format docker --build-arg TARGETARCH=arm64 --build-arg BASE=<an arm64 bookworm> -t adapterd:arm64 .
#                                          (or docker buildx build --platform linux/arm64 .)
#
# Two architectures, linux/amd64 and linux/arm64, from one Dockerfile: the build stage always runs on
# the building machine's own architecture (BUILDPLATFORM; its base is BUILD_BASE) and cross-compiles
# with Debian's aarch64 toolchain and arm64 libraries when the target is arm64, so that only the
# runtime stages' apt-get runs under emulation (qemu-user through binfmt_misc). An arm64 image carries
# the ARM64 kernels (NEON, dotprod, i8mm, bf16; engine/math/arm/) and picks among them at start as the
# x86 one does. scripts/ci-container.sh builds both and joins them in one manifest list.
#
# Stages: build (toolchain, compiles adapterd only), base (the shared libraries adapterd links and
# a non-root user), example (base + examples/registry) and runtime (base + an empty /registry
# volume; the default, being last). One image for every x86-64 host: the build carries the engine's
# kernels for each vector level (portable C, AVX2, AVX-VNNI, AVX-512, AVX512-VNNI / BF16; engine/
# math/kern.h) and the server picks the best its CPU has when it starts (`adapterd version` and
# /metrics' adapterd_cpu_info say which). No -march=native: it is the default build, the one the
# tests and benchmarks measure.
# podman keeps HEALTHCHECK only with --format docker.

ARG BASE=debian:bookworm-slim
ARG BUILD_BASE=${BASE}

FROM --platform=$BUILDPLATFORM ${BUILD_BASE} AS build
ARG DEBIAN_FRONTEND=noninteractive
ARG BUILDARCH
ARG TARGETARCH
# native: the compiler and the libraries; arm64 from another architecture: the cross compiler, the
# libraries' arm64 packages (multiarch) and qemu-user-static, which runs the build's own generators
# (proto_yaml2json, proto_bin2c: arm64 programs there) as CMake's CROSSCOMPILING_EMULATOR; protoc-c (gRPC's
# messages) is the build host's either way
RUN libs="libopenblas-dev libjansson-dev libutf8proc-dev libpcre2-dev libmicrohttpd-dev libuv1-dev libyaml-dev zlib1g-dev libnghttp2-dev libprotobuf-c-dev libgnutls28-dev libcurl4-openssl-dev" \
 && if [ "${TARGETARCH:-$BUILDARCH}" = arm64 ] && [ "$BUILDARCH" != arm64 ]; then \
      dpkg --add-architecture arm64 \
      && pkgs="gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user-static cmake make pkg-config protobuf-c-compiler $(for l in $libs; do printf '%s:arm64 ' $l; done)"; \
    else pkgs="build-essential cmake pkg-config protobuf-c-compiler $libs"; fi \
 && apt-get update -q \
 && apt-get install -y -q --no-install-recommends $pkgs \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY CMakeLists.txt ./
COPY cmake/ cmake/
COPY engine/ engine/
COPY proto/ proto/
COPY adapters_store/ adapters_store/
COPY server/ server/
COPY tools/ tools/
# Redoc for GET /docs, compiled in when the host installed it (scripts/setup.sh; .dockerignore lets
# only the bundle and its licences through), else the page answers 503
COPY docs/redoc/ docs/redoc/
RUN if [ "${TARGETARCH:-$BUILDARCH}" = arm64 ] && [ "$BUILDARCH" != arm64 ]; then \
      cross="-DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake" strip=aarch64-linux-gnu-strip; \
    else cross="" strip=strip; fi \
 && cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DADAPTERD_NATIVE=OFF -DADAPTERD_BUILD_TESTS=OFF \
      -DADAPTERD_BUILD_BENCH=OFF $cross \
 && cmake --build build -j"$(nproc)" --target adapterd \
 && $strip build/tools/adapterd

FROM ${BASE} AS base
ARG DEBIAN_FRONTEND=noninteractive
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="adapterd" \
      org.opencontainers.image.description="Multi-task transformer inference server: one encoder, many adapter tasks, HTTP/JSON and KServe v2" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.base.name="${BASE}"
# libopenblas0-pthread is Debian's DYNAMIC_ARCH build: it picks its kernels for the CPU it runs on
RUN apt-get update -q \
 && apt-get install -y -q --no-install-recommends libopenblas0-pthread libjansson4 libutf8proc2 \
      libpcre2-8-0 libmicrohttpd12 libuv1 zlib1g libnghttp2-14 libprotobuf-c1 libgnutls30 libcurl4 \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/log/* \
 && useradd --system --uid 10001 --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin adapterd \
 && mkdir -p /registry && chown adapterd:adapterd /registry
COPY --from=build /src/build/tools/adapterd /usr/local/bin/adapterd
# every option can come from ADAPTERD_* (flags > config file > environment)
ENV ADAPTERD_REGISTRY=/registry \
    ADAPTERD_HOST=0.0.0.0 \
    ADAPTERD_PORT=8080
EXPOSE 8080
# no curl in the image: bash's /dev/tcp asks /healthz for its status line; with TLS (ADAPTERD_TLS_CERT; bash speaks
# no TLS) it only checks that the port accepts connections
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
  CMD ["/bin/bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/${ADAPTERD_PORT:-8080} && { [ -n \"${ADAPTERD_TLS_CERT:-}\" ] || { printf 'GET /healthz HTTP/1.0\\r\\n\\r\\n' >&3 && head -n1 <&3 | grep -q ' 200 '; }; }"]
USER 10001:10001
WORKDIR /registry
# SIGTERM drains (readiness off, work in flight completes); give it --drain-timeout-ms to do so
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/adapterd", "serve"]

FROM base AS example
COPY --chown=10001:10001 examples/registry/ /registry/
VOLUME ["/registry"]

FROM base AS runtime
VOLUME ["/registry"]
