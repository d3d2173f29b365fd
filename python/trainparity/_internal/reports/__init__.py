"""The reports layer: text and HTML views, machine reports, figures, and the result mixin."""
