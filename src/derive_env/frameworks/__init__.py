"""FRAMEWORKS: one line per framework, the only list of them.

Each line names the framework (as the ``ai.backend.distributed.frameworks`` label accepts
it), the module whose ``derive(context) -> Contribution`` derives its variables
(:mod:`derive_env.frameworks.context` has the kit), and the label under
``ai.backend.distributed.`` of the port its server listens on, with that port's default.
``always``: derived for every opted-in image, whatever the label lists (the interface hints
of :mod:`derive_env.frameworks.network`); such a line is not a label value. What a node
decides alone is a variable's own field (``DerivedVariable.node_decided``), not a line's.

The order is the order their variables are listed in, and the order of the manager's port
policy (:func:`derive_env.ports.job_ports`). Read by :mod:`derive_env.policy` (names, port
labels and defaults), :func:`derive_env.labels.near_miss` (port labels),
:mod:`derive_env.ports` and :mod:`derive_env.pipeline`. A new framework is its module plus
one line here.
"""

from collections import namedtuple

#: ``serves``: what the port is, in messages about two servers on one port of a host.
Framework = namedtuple(
    "Framework", "name module port_label default_port serves always",
    defaults=(None, None, None, False))

FRAMEWORKS = (
    Framework("pytorch", "derive_env.frameworks.pytorch", port_label="master-port",
              default_port=29500, serves="the master port"),
    Framework("tensorflow", "derive_env.frameworks.tensorflow", port_label="tensorflow-port",
              default_port=2222, serves="TensorFlow's"),
    Framework("jax", "derive_env.frameworks.jax", port_label="jax-port", default_port=1234,
              serves="the JAX coordinator's"),
    Framework("network", "derive_env.frameworks.network", always=True),
)
