"""What the composite ops share."""

import enum


class Version(enum.Enum):
    """The version of a composite op's definition (its declaration's ``version``)."""

    v1 = 1
