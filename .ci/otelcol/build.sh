#!/usr/bin/env bash
# Builds the OpenTelemetry Collector the OTLP tests use, once per machine:
# the binary is cached at target/otelcol/mtlab-otelcol-VERSION and reused
# while the manifest is unchanged. Needs Go and the Go module proxy.
# Usage: .ci/otelcol/build.sh  (prints the binary's path on success)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
version=$(awk '/^  version:/ { print $2; exit }' "$here/manifest.yaml")
out="$root/target/otelcol"
bin="$out/mtlab-otelcol-$version"
stamp="$bin.manifest"
if [ -x "$bin" ] && cmp -s "$here/manifest.yaml" "$stamp"; then
  echo "$bin"; exit 0
fi
export PATH="/usr/local/go/bin:$PATH"
command -v go >/dev/null || { echo "otelcol: go not found: install Go to build the Collector" >&2; exit 1; }
mkdir -p "$out/bin" "$out/build"
GOBIN="$out/bin" go install "go.opentelemetry.io/collector/cmd/builder@v$version" >&2
sed "s|^dist:|dist:\n  output_path: $out/build|" "$here/manifest.yaml" > "$out/manifest.yaml"
# -p 1 keeps the Go build to one core at a time on a 2-core machine shared with cargo
GOFLAGS="${GOFLAGS:-} -p=1" "$out/bin/builder" --config "$out/manifest.yaml" >&2
cp "$out/build/mtlab-otelcol" "$bin.tmp" && mv "$bin.tmp" "$bin"
cp "$here/manifest.yaml" "$stamp"
echo "$bin"
