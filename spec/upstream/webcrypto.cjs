// Preloaded (node --require) into server-everything's HTTP mode, which uses the global
// `crypto` that Node 18 (Debian bookworm's nodejs) has only behind a flag: there it
// answered every request 400 "crypto is not defined". Node 20 and later have it already.
if (typeof globalThis.crypto === 'undefined') globalThis.crypto = require('node:crypto').webcrypto;
