// Package docs holds the project's documentation (Markdown); its tests hold
// the pages to the code: each sink page's field reference is what the sink's
// config declares, and every relative link and #anchor resolves.
package docs
