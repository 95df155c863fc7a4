# AX container image: one `ax` binary whose subcommand picks the role
# (scheduler, api, worker, migrate, dev). See docker-compose.yml.

# --- build stage -------------------------------------------------------------
FROM rust:1-bookworm AS builder
WORKDIR /src
# The whole workspace is needed: `ax` depends on every other crate.
COPY . .
RUN cargo build --release -p ax

# --- runtime stage -----------------------------------------------------------
# Same Debian release as the builder so the glibc the binary links against exists.
FROM debian:bookworm-slim
# ca-certificates: TLS to external endpoints (HTTP tasks, TLS-enabled brokers).
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/*
COPY --from=builder /src/target/release/ax /usr/local/bin/ax
# Migrations and NATS stream definitions are embedded in the binary; the copies
# are only for inspection/debugging inside the container.
COPY migrations/ /opt/ax/migrations/
COPY nats/ /opt/ax/nats/
# Nothing in AX needs root at runtime.
RUN useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin ax
USER ax
ENTRYPOINT ["ax"]
CMD ["dev"]
