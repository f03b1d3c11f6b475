"""Built-in lowerings, one module per op family.

Every module in this package is imported here, so a new family module only
has to exist: its ``@register_lowering`` decorators run on import.
"""

import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    if not _module.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_module.name}")
