#!/usr/bin/env bash
# Make a private certificate authority and the certificates of a dmcsvm Dask cluster.
#
#   cluster/tls/make-certs.sh OUT_DIR [--hosts "sched.example.org,10.0.0.5,..."] [--days 365]
#
# Writes to OUT_DIR (created if missing):
#   ca.pem         the cluster's CA certificate: every scheduler, worker and client trusts it
#   ca-key.pem     the CA's private key: keep it off the cluster (it signs new members)
#   scheduler.pem  scheduler-key.pem   certificate + key of the scheduler
#   worker.pem     worker-key.pem      shared by all workers
#   client.pem     client-key.pem      for the process that trains (dmcsvm train, Python)
#   dask-tls.yaml  cluster/tls/dask-tls.yaml with its paths pointing at OUT_DIR
#
# Dask authenticates both ends of every connection (the server asks for the peer's certificate,
# signed by ca.pem), so only holders of a key signed by this CA can join or submit work.
# Certificates name 127.0.0.1 and localhost plus --hosts (DNS names or IPv4/IPv6 addresses) as
# subjectAltNames. Dask itself does not check host names (it expects a cluster-private CA and IP
# addresses), but other TLS tools do, so list the hosts the scheduler and workers run on.
# Keys are EC P-256 and readable by their owner only. Re-running replaces every file: members
# holding the old certificates can no longer connect (that is how you revoke them all).
set -euo pipefail

usage() { sed -n '2,4p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

out=""
hosts=""
days=365
while [ $# -gt 0 ]; do
  case "$1" in
    --hosts) hosts="${2:?--hosts needs a value}"; shift 2 ;;
    --hosts=*) hosts="${1#--hosts=}"; shift ;;
    --days) days="${2:?--days needs a value}"; shift 2 ;;
    --days=*) days="${1#--days=}"; shift ;;
    -h|--help) usage ;;
    -*) echo "make-certs.sh: unknown option $1" >&2; usage ;;
    *) [ -z "$out" ] || { echo "make-certs.sh: one OUT_DIR only" >&2; usage; }; out="$1"; shift ;;
  esac
done
[ -n "$out" ] || usage
case "$days" in ''|*[!0-9]*) echo "make-certs.sh: --days must be a positive integer, got '$days'" >&2; exit 2 ;; esac
command -v openssl >/dev/null || { echo "make-certs.sh: openssl is not installed" >&2; exit 1; }

here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
umask 077
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# subjectAltName list: loopback always, then --hosts (an entry of digits/dots or with a ':' is an IP)
san="DNS:localhost,IP:127.0.0.1,IP:::1"
IFS=',' read -r -a extra <<< "$hosts"
for h in "${extra[@]:-}"; do
  h="$(echo "$h" | tr -d '[:space:]')"
  [ -n "$h" ] || continue
  if [[ "$h" =~ ^[0-9.]+$ || "$h" == *:* ]]; then san="$san,IP:$h"; else san="$san,DNS:$h"; fi
done

newkey() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

# the CA
newkey "$out/ca-key.pem"
openssl req -x509 -new -key "$out/ca-key.pem" -sha256 -days "$days" -subj "/CN=dmcsvm-cluster-ca" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
  -out "$out/ca.pem"

# one certificate per role; scheduler and workers both accept and open connections
for role in scheduler worker client; do
  if [ "$role" = client ]; then eku="clientAuth"; else eku="serverAuth,clientAuth"; fi
  newkey "$out/$role-key.pem"
  openssl req -new -key "$out/$role-key.pem" -subj "/CN=dmcsvm-$role" -out "$tmp/$role.csr"
  cat > "$tmp/$role.ext" <<EXT
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=$eku
subjectAltName=$san
EXT
  openssl x509 -req -in "$tmp/$role.csr" -CA "$out/ca.pem" -CAkey "$out/ca-key.pem" \
    -CAcreateserial -CAserial "$tmp/ca.srl" -sha256 -days "$days" -extfile "$tmp/$role.ext" \
    -out "$out/$role.pem" 2>/dev/null
  openssl verify -CAfile "$out/ca.pem" "$out/$role.pem" >/dev/null
done
chmod 644 "$out"/ca.pem "$out"/scheduler.pem "$out"/worker.pem "$out"/client.pem

# the Dask configuration that uses them (the template's /etc/dmcsvm/tls prefix -> OUT_DIR)
sed "s#/etc/dmcsvm/tls#$out#g" "$here/dask-tls.yaml" > "$out/dask-tls.yaml"
chmod 644 "$out/dask-tls.yaml"
echo "certificates for $san written to $out"
