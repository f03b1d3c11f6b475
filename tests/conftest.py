# coreai-core's dialect modules import coreai.authoring circularly unless the
# latter is imported first; test modules import `coreai._compiler.dialects`
# directly (as Apple's lowering guide does after importing coreai_torch).
import coreai.authoring  # noqa: F401
