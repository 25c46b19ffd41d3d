// Forms that ask before they act: <form data-confirm="Delete team x?">. The
// Content-Security-Policy forbids inline on* handlers, so the question lives in an attribute
// and this file asks it.
(function () {
  "use strict";
  document.addEventListener("submit", function (event) {
    var form = event.target;
    var question = form.getAttribute && form.getAttribute("data-confirm");
    if (question && !window.confirm(question)) {
      event.preventDefault();
    }
  });
})();
