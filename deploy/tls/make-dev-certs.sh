#!/usr/bin/env bash
# Throwaway certificates for trying the templates in deploy/ (compose or a test cluster): a
# private CA and one server certificate for every NATS node. They are NOT for production:
# there, the certificates come from your own CA or from cert-manager (see deploy/README.md,
# "Security"), and the CA key never sits next to the server.
#
#   deploy/tls/make-dev-certs.sh [OUTPUT_DIR]
#
# OUTPUT_DIR defaults to this script's directory (deploy/tls, where compose.yaml mounts them).
# Writes ca.pem (the CA that clients trust: JSWORKER_TLS_CA), ca.key, server.pem and server.key;
# .gitignore keeps them out of the repository. Running it again replaces all four, so restart
# the servers and clients afterwards.
#
# NAMESPACE (default: default) is the Kubernetes namespace of deploy/k8s: its fully qualified
# service names go into the certificate as well as the short ones.
set -euo pipefail

out="${1:-$(cd "$(dirname "$0")" && pwd)}"
namespace="${NAMESPACE:-default}"
days="${DAYS:-365}"
mkdir -p "$out"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# Every name a client or a peer dials: the compose services (routes and workers), localhost for
# producers on the Docker host, and the pods of the k8s headless Service "nats". A name missing
# here fails the TLS handshake with a hostname mismatch.
names=(nats-1 nats-2 nats-3 localhost nats nats-0.nats nats-1.nats nats-2.nats)
names+=("nats.$namespace.svc" "*.nats.$namespace.svc" "*.nats.$namespace.svc.cluster.local")
san="IP:127.0.0.1"
for name in "${names[@]}"; do
    san="$san,DNS:$name"
done

# A config file rather than -addext, which openssl releases before 1.1.1 lack.
cat >"$work/openssl.cnf" <<EOF
[req]
distinguished_name = dn
prompt = no
[dn]
CN = jsworker dev
[ca]
basicConstraints = critical, CA:TRUE, pathlen:0
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
# clientAuth as well: nats-server routes always use mutual TLS, and each node presents this
# same certificate to its peers.
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = $san
authorityKeyIdentifier = keyid
EOF

# P-256 keys: fast to make, and every nats-server and Python TLS stack accepts them.
umask 077
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$work/ca.key"
openssl req -new -x509 -config "$work/openssl.cnf" -extensions ca -key "$work/ca.key" \
    -subj "/CN=jsworker dev CA" -days "$days" -out "$work/ca.pem"
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$work/server.key"
openssl req -new -config "$work/openssl.cnf" -key "$work/server.key" \
    -subj "/CN=nats" -out "$work/server.csr"
# A random serial instead of -CAcreateserial, which would leave a .srl file behind.
openssl x509 -req -in "$work/server.csr" -CA "$work/ca.pem" -CAkey "$work/ca.key" \
    -set_serial "0x$(openssl rand -hex 16)" -days "$days" \
    -extfile "$work/openssl.cnf" -extensions server -out "$work/server.pem"
openssl verify -CAfile "$work/ca.pem" "$work/server.pem" >/dev/null

# Certificates are public; the keys stay readable by their owner only (the nats container runs
# as root, so it can still read the mounted server key).
chmod 644 "$work/ca.pem" "$work/server.pem"
mv "$work/ca.pem" "$work/ca.key" "$work/server.pem" "$work/server.key" "$out/"
echo "wrote $out/ca.pem, ca.key, server.pem, server.key (valid for: ${san//,/ })"
