#!/usr/bin/env bash
# Makes the conformance suite's certificates with openssl into DIR (created if absent):
#   ca.pem, ca.key            a CA (the one clients trust, and the one client certificates chain to)
#   server.pem, server.key    a server certificate of that CA for 127.0.0.1, ::1 and localhost
#   client.pem, client.key    a client certificate of that CA (mutual TLS)
#   other-ca.pem, other-ca.key  a second CA that signed nothing here: a client trusting it
#                             must refuse the server
# Usage: certs.sh DIR. Fails (exit 1) when openssl is missing. Keys are EC P-256, PKCS#8.
set -euo pipefail
dir=${1:?usage: certs.sh DIR}
command -v openssl >/dev/null || { echo "certs.sh: openssl is not installed" >&2; exit 1; }
mkdir -p "$dir"
cd "$dir"
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
ca() { # ca NAME SUBJECT
  key "$1.key"
  openssl req -x509 -new -key "$1.key" -sha256 -days 3650 -subj "$2" -out "$1.pem" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
}
leaf() { # leaf NAME SUBJECT EXTENSIONS
  key "$1.key"
  openssl req -new -key "$1.key" -subj "$2" -out "$1.csr"
  printf '%s\n' "$3" >"$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -sha256 -days 3650 \
    -extfile "$1.ext" -out "$1.pem" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}
ca ca "/CN=idmint conformance CA"
ca other-ca "/CN=idmint conformance other CA"
leaf server "/CN=localhost" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth
subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1"
leaf client "/CN=idmint conformance client" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth"
rm -f ca.srl
