#!/usr/bin/env python3
"""Collects the envelopes the tests know (tests/: every raw string literal,
and every plain string literal, that reads as a JSON document or a broken
one passed to ParseEnvelope / EnqueueJson) into the seed corpora of the
envelope and raw-enqueue fuzz targets, one file per envelope named by its
hash. Usage: extract_test_envelopes.py <repo root> <corpus dir>."""
import hashlib
import os
import re
import sys

root, corpus = sys.argv[1], sys.argv[2]
files = ["tests/core/envelope_test.cc", "tests/runner/runner_dlq_test.cc",
         "tests/runner/transition_event_test.cc", "tests/runner/job_runner_test.cc"]
raw_re = re.compile(r'R"([^(\s]*)\((.*?)\)\1"', re.S)
plain_re = re.compile(r'(?:ParseEnvelope|EnqueueJson)\(\s*"((?:[^"\\]|\\.)*)"')
found = set()
for rel in files:
    text = open(os.path.join(root, rel), encoding="utf-8").read()
    for m in raw_re.finditer(text):
        s = m.group(2)
        if s.lstrip().startswith(("{", "[")) or '"job_type"' in s:
            found.add(s)
    for m in plain_re.finditer(text):
        found.add(bytes(m.group(1), "utf-8").decode("unicode_escape").encode("latin-1").decode("utf-8", "replace"))
for target in ("envelope_fuzzer", "enqueue_json_fuzzer"):
    d = os.path.join(corpus, target)
    os.makedirs(d, exist_ok=True)
    for s in found:
        data = s.encode("utf-8")
        name = "test_" + hashlib.sha1(data).hexdigest()[:16]
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)
print(f"{len(found)} envelopes from tests/")
