"""The tests' one helpers home (plain functions and classes, no fixtures; the
fixtures are in ``tests/conftest.py``):

- ``settings``: the open-windows boards, test ``Settings``, ``open_windows_env``;
- ``clients``: ``SignedClient``, ``event()``, the admin and friends helpers;
- ``lb``: the ``lb`` subprocess (``lb(...)``, ``lb_env``, ``stack_env``, ``running``);
- ``client_stack``: the client libraries' shared ``lb up`` stack (``ClientStack``);
- ``spark``: the test SparkSession's configuration (one JVM per session);
- ``markers``: the layer-marker check (every test is unit, integration or e2e);
- ``segments``, ``jobs``, ``incremental``, ``shadow``, ``season``, ``rebuild``,
  ``rules``, ``live``: what several test modules share (generations written
  without Spark, bronze rows and oracles, seeded boards, the live oracle).

Test modules import from here, never from another test module.
"""
