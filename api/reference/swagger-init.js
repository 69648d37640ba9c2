// Starts Swagger UI on /docs. A file rather than the inline script FastAPI's page carries, so
// the page's Content-Security-Policy can forbid inline script (routes_docs.DOCS_CSP). The
// OpenAPI document's address comes from the page (it depends on the server's root path).
"use strict";

(() => {
  const target = document.getElementById("swagger-ui");
  window.ui = SwaggerUIBundle({
    url: target.dataset.openapiUrl,
    dom_id: "#swagger-ui",
    layout: "BaseLayout",
    deepLinking: true,
    showExtensions: true,
    showCommonExtensions: true,
    presets: [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset],
  });
})();
