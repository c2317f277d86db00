# ordersd (and fakepay, the development payment provider, and shipper, the
# sample consumer of the order events) on the local Redis
# image (Debian bookworm, so it has libc and a shell for debugging). The
# binaries are built on the host with CGO_ENABLED=0 into compose/bin/ before
# `docker-compose build`.
ARG BASE_IMAGE=quorumlock/redis:bookworm
FROM ${BASE_IMAGE}
COPY bin/ordersd /usr/local/bin/ordersd
COPY bin/fakepay /usr/local/bin/fakepay
COPY bin/shipper /usr/local/bin/shipper
USER 65534:65534
WORKDIR /
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/ordersd"]
CMD []
