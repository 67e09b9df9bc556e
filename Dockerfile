# syntax=docker/dockerfile:1
# Build:  docker build -t assist-gateway .
# Run:    docker run -p 8080:8080 -e ASSIST__LLM__BASE_URL=http://host.docker.internal:11434 assist-gateway

FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY .cargo ./.cargo
COPY build.rs ./
COPY proto ./proto
COPY src ./src
COPY config ./config
COPY benches ./benches
COPY tests ./tests
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin assist-gateway \
 && cp target/release/assist-gateway /assist-gateway

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --create-home --home-dir /var/lib/assist-gateway assist
COPY --from=build /assist-gateway /usr/local/bin/assist-gateway
COPY config /etc/assist-gateway
USER assist
WORKDIR /var/lib/assist-gateway
ENV ASSIST__SERVER__ADDR=0.0.0.0:8080 \
    ASSIST__GRPC__ADDR=0.0.0.0:50051 \
    ASSIST__DATA_DIR=/var/lib/assist-gateway/data
EXPOSE 8080 50051
HEALTHCHECK --interval=30s --timeout=3s --start-period=5s --retries=3 \
  CMD curl -fsS http://127.0.0.1:8080/health || exit 1
ENTRYPOINT ["assist-gateway"]
CMD ["serve"]
