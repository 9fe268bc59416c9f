// The resolve hook of without-packages.mjs: a hidden package (or a path inside it) fails to
// resolve as a missing one does.
let hidden = [];

export function initialize(data) {
  hidden = data;
}

export function resolve(specifier, context, next) {
  if (hidden.some((name) => specifier === name || specifier.startsWith(`${name}/`))) {
    const error = new Error(`Cannot find package '${specifier}' (hidden for the test)`);
    error.code = 'ERR_MODULE_NOT_FOUND';
    throw error;
  }
  return next(specifier, context);
}
