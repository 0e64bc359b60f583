#!/usr/bin/env bash
# The system packages groupkeeper needs, from Debian: ZooKeeper and a Java runtime (which
# PySpark uses too), Chromium, in which the tests render the analysis report, and promtool,
# with which they check deploy/prometheus/ (Debian ships it in the `prometheus` package, ~19 MB;
# where systemd runs, installing it also starts a Prometheus server on :9090), and HAProxy, the
# plain TCP relay `groupkeeper bench gateway` measures the gateway against; Maven and a JDK
# (javac: the tests run the Java client's programs as single-file sources), with which
# `make install` fetches Apache Kafka's jars and the tests run Kafka 4.4 (Java 17 or newer);
# and Go, with which `make install` builds the tests' Go clients (deploy/go-clients.sh): any Go
# the machine has will do (on PATH or /usr/local/go), else Debian's golang-go, 1.19 on
# bookworm, which only fetches the Go 1.26 they need from the Go module proxy.
# Installs them with apt-get when missing and running as root; otherwise says what to install.
set -euo pipefail

zk_jar=/usr/share/java/zookeeper.jar
missing=()
[ -f "$zk_jar" ] || missing+=(zookeeper)
command -v javac >/dev/null 2>&1 || missing+=(default-jdk-headless)
command -v mvn >/dev/null 2>&1 || missing+=(maven)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
haproxy_bin=/usr/sbin/haproxy  # not on a non-root user's PATH on Debian
[ -x "$haproxy_bin" ] || command -v haproxy >/dev/null 2>&1 || missing+=(haproxy)
has_go() { command -v go >/dev/null 2>&1 || [ -x /usr/local/go/bin/go ] || [ -x /usr/lib/go/bin/go ]; }
has_go || missing+=(golang-go)

[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "groupkeeper needs ZooKeeper, a JDK, Maven, Chromium, promtool, HAProxy and Go: install the Debian packages: ${missing[*]}" >&2
    echo "  (as root: apt-get update && apt-get install -y ${missing[*]})" >&2
    exit 1
fi

echo "installing ${missing[*]} with apt-get" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
[ -f "$zk_jar" ] && command -v javac >/dev/null 2>&1 && command -v mvn >/dev/null 2>&1 && command -v chromium >/dev/null 2>&1 \
    && command -v promtool >/dev/null 2>&1 && { [ -x "$haproxy_bin" ] || command -v haproxy >/dev/null 2>&1; } && has_go || {
    echo "apt-get finished but $zk_jar, javac, mvn, chromium, promtool, haproxy or go is still missing" >&2
    exit 1
}
