# Stand-in for orjson where it is not installed (Debian does not package it), for running
# SGLang's mini_lb in npm run bench:proxy: the calls mini_lb and fastify's ORJSONResponse make.
import json

OPT_NON_STR_KEYS = 1
OPT_SERIALIZE_NUMPY = 2


def dumps(obj, option=None, default=None):
    return json.dumps(obj, separators=(",", ":"), default=default).encode()


def loads(data):
    return json.loads(data)
