"""A stand-in for the jaxtyping package, which linear_operator 0.5.3 imports
for shape annotations only (``Float[Tensor, "n n"]``, some evaluated at
import time). Debian has no jaxtyping; this makes ``X[T, "dims"]`` mean T
and ``jaxtyped`` the identity. It checks nothing."""


class _Annotation:
    def __class_getitem__(cls, params):
        return params[0] if isinstance(params, tuple) else params


class Float(_Annotation):
    pass


class Int(_Annotation):
    pass


class Bool(_Annotation):
    pass


class Shaped(_Annotation):
    pass


class Num(_Annotation):
    pass


def jaxtyped(fn=None, **kwargs):
    return (lambda f: f) if fn is None else fn


__version__ = "0-lazytensor-bench-shim"
