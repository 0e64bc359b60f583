#!/usr/bin/env bash
# Builds the Go clients' program of the tests (tests/kafka/go: franz-go and IBM sarama group
# members) into var/go/bin/goclients, with its modules, build cache and any toolchain under
# var/go, so the tests run offline. `make install` runs it (target go-clients).
#
# franz-go 1.22 and sarama 1.61 need Go 1.26 (tests/kafka/go/go.mod). Any Go this finds
# does: the machine's (on PATH, /usr/local/go), else Debian's golang-go, which
# deploy/ensure-system-packages.sh installs where there is no Go. Debian bookworm's is 1.19,
# too old to build them and older than Go's own toolchain switching (1.21), so when the Go
# found is older than go.mod asks, it downloads Go $GO_TOOLCHAIN from the Go module proxy, as
# the module golang.org/toolchain (the form in which the proxy serves Go itself, checked
# against the checksum database like any module), and builds with that.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
var=$root/var/go
source=$root/tests/kafka/go
toolchain=${GO_TOOLCHAIN:-go1.26.8}
export GOMODCACHE=$var/mod GOCACHE=$var/cache GOPATH=$var/path GOFLAGS=-modcacherw GOTOOLCHAIN=local
mkdir -p "$var/bin"

go=$(command -v go || true)
for candidate in /usr/local/go/bin/go /usr/lib/go/bin/go; do
    if [ -z "$go" ] && [ -x "$candidate" ]; then go=$candidate; fi
done
if [ -z "$go" ]; then
    echo "no Go toolchain: install Debian's golang-go (deploy/ensure-system-packages.sh does, as root)" >&2
    exit 1
fi

at_least() {  # at_least HAVE NEED: version HAVE >= NEED
    [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n 1)" = "$2" ]
}
need=$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$source/go.mod")
have=$("$go" env GOVERSION)
have=${have#go}
if ! at_least "$have" "$need"; then
    platform=$("$go" env GOHOSTOS)-$("$go" env GOHOSTARCH)
    module=golang.org/toolchain@v0.0.1-$toolchain.$platform
    echo "go-clients: $go is Go $have, older than the $need go.mod needs: fetching $module" >&2
    # outside any module, where every Go since 1.13 downloads a module@version by itself
    dir=$(cd "$var" && "$go" mod download -json "$module" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
    [ -n "$dir" ] && [ -f "$dir/bin/go" ] || { echo "go-clients: $module did not download" >&2; exit 1; }
    chmod +x "$dir"/bin/* "$dir"/pkg/tool/*/*  # module zips keep no modes
    go=$dir/bin/go
fi

cd "$source"
"$go" build -mod=readonly -trimpath -buildvcs=false -o "$var/bin/goclients" .
echo "go-clients: built var/go/bin/goclients with $("$go" env GOVERSION)" >&2
