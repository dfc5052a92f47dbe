"""The HTTP application on top of the engine: ``course serve`` and ``course bench-serve``.

- ``server``: the FastAPI app (routes, auth, errors) and the ``course serve`` command;
- ``openai_protocol``: the OpenAI request and response shapes, and which parameters are
  implemented, accepted or rejected;
- ``openai_service``: how a chat or completion request becomes engine requests (templates,
  tools, structured output, streaming);
- ``metrics``: the Prometheus metrics the server exports;
- ``loadgen``: the load generator that drives a server over HTTP (``course bench-serve``).

This package sits above ``course_lib.serving`` (the engine): the engine never imports it.
"""
