// ESM entry: the implementation is tidepool.cjs (one copy for import and require).
import tidepool from './tidepool.cjs';

export const {
  Tidepool, TidepoolError, createCodeTool, codeModeTool, modelView, findBinary, toJsonSchema,
} = tidepool;
export default tidepool;
