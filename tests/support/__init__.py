"""Everything the tests share, and nothing else: no tests live here.

Data modules (hand-built snapshots, readings, trace bodies, hostile values), loopback servers (hostile
HTTP servers, a fake Prometheus, an OTLP receiver, the real-server harness), runners (the CLI in or out of
the test's process, a load plan run to its end, a terminal on a pty or in tmux) and the one way to wait
for a condition. Test modules and conftest.py files import from here, never from another test module
(tests/unit/test_test_imports.py checks it); benchmarks may import from here too.
"""
