import { keyProcedure, router } from '../../trpc.js';
import { ListModelsInput, ModelListSchema } from './schema.js';

export const modelsRouter = router({
  list: keyProcedure
    .meta({
      openapi: {
        method: 'GET',
        path: '/models',
        tags: ['Models'],
        protect: true,
        summary: 'The models a caller may pass as `model`, with kind, context window and prices',
        description:
          'Extension: not in the interface specification. Lists the active models of the catalog (MODELS_FILE or the CHAT_MODEL / EMBEDDING_MODEL variables); any other `model` is 400 `Invalid model`, whose `details.validModels` names these ids.',
      },
    })
    .input(ListModelsInput)
    .output(ModelListSchema)
    .query(({ ctx, input }) => {
      const { models } = ctx.deps;
      return {
        models: models.list(input.kind).map((m) => ({
          id: m.id,
          kind: m.kind,
          contextWindow: m.contextWindow,
          inputPricePerMTok: m.inputPricePerMTok,
          outputPricePerMTok: m.outputPricePerMTok,
          pricePerImage: m.pricePerImage ?? null,
          default: models.defaultId(m.kind) === m.id,
        })),
      };
    }),
});
