#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# make-pki.sh DIR -- a throwaway PKI for the TLS tests (tests/tlspki.h), made
# with the openssl command in DIR:
#
#   ca.crt ca.key                 the CA the servers and clients trust
#   server.crt server.key         a server certificate for localhost and 127.0.0.1
#   client.crt client.key         a client certificate (mutual TLS)
#   other-ca.crt other-ca.key     a CA nobody trusts
#   other-client.crt .key         a client certificate of that CA
#   expired.crt expired.key       a server certificate of ca.crt, expired in 2020
#
# EC P-256 keys, mode 0600; certificates valid for 2 days.
set -eu
dir=$1
cd "$dir"
umask 077
quiet() { "$@" >openssl.log 2>&1 || { cat openssl.log >&2; exit 1; }; }
ca() { # NAME SUBJECT
    quiet openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
        -keyout "$1.key" -out "$1.crt" -days 2 -subj "/CN=$2"
}
leaf() { # NAME SUBJECT CA [EXTENSION]
    quiet openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
        -keyout "$1.key" -out "$1.csr" -subj "/CN=$2"
    printf '%s\n' "${4:-extendedKeyUsage=clientAuth}" >"$1.ext"
    quiet openssl x509 -req -in "$1.csr" -CA "$3.crt" -CAkey "$3.key" -CAcreateserial \
        -out "$1.crt" -days 2 -extfile "$1.ext"
}
server_ext='subjectAltName=DNS:localhost,IP:127.0.0.1'
ca ca "dlock test CA"
ca other-ca "another CA"
leaf server localhost ca "$server_ext"
leaf client dlockd ca
leaf other-client dlockd other-ca
# Expired: openssl ca takes the validity dates given.
mkdir -p expired.db
: >expired.db/index.txt
echo 01 >expired.db/serial
cat >expired.db/ca.cnf <<CNF
[ca]
default_ca = x
[x]
database = $PWD/expired.db/index.txt
new_certs_dir = $PWD/expired.db
serial = $PWD/expired.db/serial
default_md = sha256
policy = p
copy_extensions = copy
[p]
commonName = supplied
CNF
quiet openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout expired.key \
    -out expired.csr -subj "/CN=localhost" -addext "$server_ext"
quiet openssl ca -batch -config expired.db/ca.cnf -cert ca.crt -keyfile ca.key -in expired.csr \
    -out expired.crt -startdate 20200101000000Z -enddate 20200102000000Z -notext
chmod 0600 ./*.key
chmod 0644 ./*.crt
