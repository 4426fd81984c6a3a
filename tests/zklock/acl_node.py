#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Creates PATH (and its parents) with an ACL that gives all rights to digest USER:PASSWORD only,
so that a client without those credentials cannot create the lock nodes under it.

  acl_node.py SERVERS PATH USER PASSWORD
"""
import sys

from kazoo.client import KazooClient
from kazoo.security import make_digest_acl


def main():
    servers, path, user, password = sys.argv[1:5]
    client = KazooClient(hosts=servers, timeout=10, auth_data=[("digest", f"{user}:{password}")])
    client.start(timeout=15)
    try:
        parent = path.rsplit("/", 1)[0]
        if parent:
            client.ensure_path(parent)
        client.create(path, b"", acl=[make_digest_acl(user, password, all=True)])
        print("created", flush=True)
    finally:
        client.stop()
        client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
