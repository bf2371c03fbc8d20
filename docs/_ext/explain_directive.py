"""The ``torqueloop-explain`` directive: the key reference of one config table, as
``torqueloop check --explain TOPIC`` prints it (one source of truth for keys, types, units,
bounds, defaults and meanings: the parser's own ``doc=`` descriptions)."""

from __future__ import annotations

from docutils import nodes
from docutils.parsers.rst import Directive


class ExplainDirective(Directive):
    required_arguments = 1
    has_content = False

    def run(self):
        from controller.app.explain import explain
        from dynamics.errors import ConfigError

        topic = self.arguments[0]
        try:
            text = explain(topic)
        except ConfigError as err:
            raise self.error(f"torqueloop-explain {topic}: {err}") from err
        block = nodes.literal_block(text, text)
        block["language"] = "text"
        return [block]


def setup(app):
    app.add_directive("torqueloop-explain", ExplainDirective)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
