"""course_lib: the companion package of the course, from tokens to a served request.

Layers, top to bottom. A package or module imports only from layers below its own, never
from its own layer or above, so every import points down and no two files import each other
(``tests/test_layers.py`` reads this table and the import graph, imports inside functions
included):

    cli                                        the ``course`` command
    lab                                        ``course lab``: JupyterLab on the notebooks
    checks pipeline                            visible checks; release, autograde, export (nbgrader)
    capstone                                   notebook 09's menus and reference answers
    api evaluate drills                        HTTP server and load generator; ``course eval``; drills
    xray operations                            one request's X-ray; running the model in production (08)
    tools                                      tool calls: registry, wire format, dispatch, agent loop
    structured context                         grammars and guides; window, retrieval, grounding, logs
    generation request_trace train your_model  decode loops; one request timed; training; your own checkpoint
    serving                                    the engine: scheduler, paged KV blocks, runner, speculation
    model                                      the transformer, its KV cache, weights, two decode steps
    attention kv_memory data sampling orientation   attention; KV arithmetic; corpus; one sampling step
    tokenization validation diagrams timing    tokenizers and chat template; argument checks; pictures; timing
"""
