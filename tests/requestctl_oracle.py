#!/usr/bin/env python3
"""requestctl's own VCL for a requestctl tree: the independent oracle of the
round-trip test (tests/native.rs).

Runs conftool's real reqconfig code (schema.py, translate.py, view.py,
api.py, from the conftool sdist on PyPI, GPL-3.0+, downloaded by the test
and never copied here) on the objects of a tree, with stand-ins for the
datastore (conftool's kvobject/cli/loader, which need etcd), and writes a
complete VCL:

- the glue WMF's puppet provides: ACLs for the `abuse` ipblocks (what
  blocked-nets.inc.vcl holds) and, for `cloud` and `known-clients`, the
  X-Public-Cloud / X-Known-Client header netmapper would set from the
  client address;
- in vcl_recv, the VCL objects requestctl's `commit` writes for a site,
  in the order puppet's confd templates include them: hit-global,
  hit-SITE, global, SITE (api.get_actions_by_site, sorted by priority as
  api.get_dsl_diffs does, rendered by api.get_dsl_for).

Usage: requestctl_oracle.py CONFTOOL_SRC TREE SITE BACKEND_PORT OUT.vcl [TREE SITE BACKEND_PORT OUT.vcl …]
(each group of four is one VCL: conftool is imported once for all).
"""

import pathlib
import sys
import types

src = sys.argv[1]
jobs = sys.argv[2:]
if not jobs or len(jobs) % 4:
    sys.exit(__doc__)
sys.path.insert(0, src)

import yaml  # noqa: E402


def module(name, **attrs):
    m = types.ModuleType(name)
    m.__dict__.update(attrs)
    sys.modules[name] = m
    return m


class Entity:
    """What reqconfig reads of conftool's Entity."""

    # translate.HAProxyACLTranslator reads the HAProxy map directory.
    config = types.SimpleNamespace(
        requestctl=lambda: types.SimpleNamespace(haproxy_path="/etc/haproxy/")
    )

    def __init__(self, tag, name):
        self.tags = {self._tag: tag}
        self.name = name
        data = OBJECTS.get(self._kind, {}).get(f"{tag}/{name}")
        self.exists = data is not None
        for field, spec in SCHEMA[self._kind]["schema"].items():
            default = spec.get("default")
            setattr(self, field, (data or {}).get(field, default))

    def pprint(self):
        return f"{self.tags[self._tag]}/{self.name}"


class ObjectTypeError(Exception):
    pass


class Client:
    def __init__(self):
        self.schema = types.SimpleNamespace(entities={k: entity(k) for k in SCHEMA})

    def get(self, kind):
        return entity(kind)


def entity(kind):
    cls = type(kind, (Entity,), {"_kind": kind, "_tag": SCHEMA[kind]["tags"][0]})
    cls.all = staticmethod(
        lambda: [cls(*slug.split("/")) for slug in sorted(OBJECTS.get(kind, {}))]
    )
    return cls


# Stand-ins for the parts of conftool that talk to etcd.
module("conftool", __path__=[])
module("conftool.configuration", Config=object)
module("conftool.kvobject", Entity=Entity, KVObject=Entity)
module("conftool.cli", ConftoolClient=Client, ObjectTypeError=ObjectTypeError)
module("conftool.loader", Schema=object)
module("conftool.extensions", __path__=[])
module(
    "conftool.extensions.reqconfig",
    __path__=[str(pathlib.Path(src) / "conftool/extensions/reqconfig")],
)
module("tabulate", tabulate=None)

from conftool.extensions.reqconfig.schema import SCHEMA  # noqa: E402
from conftool.extensions.reqconfig import api  # noqa: E402

OBJECTS = {}


def render(tree, site, port, out):
    """Writes requestctl's VCL for TREE at SITE to OUT."""
    OBJECTS.clear()
    load(pathlib.Path(tree))
    body = actions(site)
    write(body, port, out)


def load(tree):
    for kind, spec in SCHEMA.items():
        base = tree / spec["path"]
        if not base.is_dir():
            continue
        for f in sorted(base.glob("*/*.yaml")):
            OBJECTS.setdefault(kind, {})[f"{f.parent.name}/{f.stem}"] = (
                yaml.safe_load(f.read_text()) or {}
            )


def actions(site):
    rq = api.RequestctlApi(Client())
    by_site = rq.get_actions_by_site("action")
    fragments = []
    for cluster, sites in by_site.items():
        for name in ["hit-global", f"hit-{site}", "global", site]:
            acts = sites.get(name, [])
            acts.sort(key=lambda x: x.priority)
            if acts:
                fragments.append(f"// {cluster}/{name}\n" + rq.get_dsl_for(acts))
    return "\n".join(fragments)


def cidrs(slug):
    return OBJECTS["ipblock"][slug].get("cidrs") or []


def acl(name, nets):
    lines = []
    for n in nets:
        addr, _, length = n.partition("/")
        lines.append(f'    "{addr}"/{length};' if length else f'    "{addr}";')
    if not lines:
        lines = ['    ! "0.0.0.0"/0;', '    ! "::"/0;']
    return f"acl {name} {{\n" + "\n".join(lines) + "\n}\n"


def write(body, port, out):
    acls, netmapper = [], []
    headers = {"cloud": "X-Public-Cloud", "known-clients": "X-Known-Client"}
    for slug in sorted(OBJECTS.get("ipblock", {})):
        scope, name = slug.split("/")
        if scope == "abuse" and f"~ {name}" in body:
            acls.append(acl(name, cidrs(slug)))
        elif scope in headers and f'"^{name}$"' in body:
            nm = f"netmapper_{scope.replace('-', '_')}_{name.replace('-', '_')}"
            acls.append(acl(nm, cidrs(slug)))
            netmapper.append(
                f'    if (std.ip(req.http.X-Client-IP, "192.0.2.1") ~ {nm}) {{\n'
                f'        set req.http.{headers[scope]} = "{name}";\n    }}'
            )

    pathlib.Path(out).write_text(
        f"""vcl 4.1;
import std;
import vsthrottle;

backend default {{
    .host = "127.0.0.1";
    .port = "{port}";
}}

{"".join(acls)}
sub vcl_recv {{
    unset req.http.X-Public-Cloud;
    unset req.http.X-Known-Client;
{chr(10).join(netmapper)}
{body}
    return (pass);
}}
"""
)


for i in range(0, len(jobs), 4):
    render(*jobs[i : i + 4])
