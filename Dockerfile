# headroom's image for Kubernetes (docs/fleet/job.yaml): the release binary on PATH, the
# shipped workloads in /workloads and the device profiles in /profiles.
#
#   docker build -t headroom:latest .
#
# No CUDA base image: headroom loads libcuda and NVML at run time, and the NVIDIA container
# toolkit mounts the node's driver libraries into the container (NVIDIA_DRIVER_CAPABILITIES
# below asks for them). Without a driver the binary runs on its simulator.

# Build with the toolchain CI uses, pinned, from the committed Cargo.lock.
FROM rust:1.95.0-slim-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin headroom \
    && strip target/release/headroom

# Run on a slim base: the binary needs glibc only.
FROM debian:bookworm-slim
COPY --from=build /src/target/release/headroom /usr/local/bin/headroom
COPY workloads /workloads
COPY profiles /profiles
ENV NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
# Results go to /results (job.yaml mounts a volume there), writable by the user that runs;
# nothing needs root.
RUN mkdir /results && chown 10001:10001 /results
USER 10001:10001
WORKDIR /results
ENTRYPOINT ["headroom"]
CMD ["--help"]
